package domain

import "time"

// MissedPolicy says what a claim does when a cron target has several slots
// at or before now, i.e. slots missed while nothing was scanning.
type MissedPolicy struct {
	// Collapse yields one occurrence for all missed slots: the earliest
	// one, the slot the target was originally due at, so that its lateness
	// stays visible downstream.
	Collapse bool
	// MaxCatchUp bounds the occurrences of one target in one claim when
	// Collapse is false: the earliest MaxCatchUp missed slots fire, later
	// missed slots are skipped. Values below 1 mean 1.
	MaxCatchUp int
}

// Advance is what a claim does to one due target: the occurrences to
// write to the outbox and the target's next state.
type Advance struct {
	// Occurrences are the slots that fire now, ascending, in UTC.
	Occurrences []time.Time
	// NextRunAt is the new next_run_at (unchanged when Status is done).
	NextRunAt time.Time
	// Status is active, or done when no slot is left.
	Status Status
	// Truncated is set when MaxCatchUp cut off missed slots.
	Truncated bool
}

// Advance computes the occurrences of t that are due at now and its next
// state. A target that is not due (NextRunAt after now) yields nothing and
// keeps its state. A one-shot yields its due time and becomes done. A cron
// target yields its missed slots according to p and moves to the first slot
// strictly after now, so a claim never leaves it due; when there is no
// further slot it becomes done.
func (t Target) Advance(now time.Time, p MissedPolicy) Advance {
	if t.NextRunAt.After(now) {
		return Advance{NextRunAt: t.NextRunAt, Status: t.Status}
	}
	if t.Schedule.Kind() != KindCron {
		return Advance{Occurrences: []time.Time{t.NextRunAt}, NextRunAt: t.NextRunAt, Status: StatusDone}
	}
	a := Advance{Status: StatusActive}
	if p.Collapse {
		a.Occurrences = []time.Time{t.NextRunAt}
	} else {
		max := p.MaxCatchUp
		if max < 1 {
			max = 1
		}
		for s := t.NextRunAt; !s.IsZero() && !s.After(now); s = t.Schedule.Next(s) {
			if len(a.Occurrences) == max {
				a.Truncated = true
				break
			}
			a.Occurrences = append(a.Occurrences, s)
		}
	}
	a.NextRunAt = t.Schedule.Next(now)
	if a.NextRunAt.IsZero() {
		a.Status = StatusDone
		a.NextRunAt = t.NextRunAt
	}
	return a
}

// Notification is one due occurrence of a target as it is published: the
// outbox row (occurrence, claim time, sequence) with the target's content.
type Notification struct {
	// ID is unique per occurrence (NotificationID, or HashedNotificationID
	// for an outbox row at or below outbox_relay.ordered_ids_after); it
	// stays the same on every re-publish and is the deduplication key
	// downstream.
	ID           string
	TargetID     int64
	RecipientID  string
	Channel      Channel
	WebhookURL   string
	TemplateID   string
	Params       []byte
	DueAt        time.Time
	OccurrenceAt time.Time
	// Sequence increases per recipient in outbox order; it is the outbox
	// row id, known once the row is stored (zero before).
	Sequence  uint64
	RunID     string
	CreatedAt time.Time
	// TargetVersion is the version of the target the occurrence was
	// claimed under (NotificationDue.target_version).
	TargetVersion uint64
	// SecretRequired: the target has its own webhook signing secret, so
	// the dispatcher must sign with it (NotificationDue.webhook_secret_required).
	SecretRequired bool
}

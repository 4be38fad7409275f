package domain

import "time"

// Planner turns the due targets of one claim into the notifications to
// store and the targets' next states.
type Planner struct {
	Policy MissedPolicy
}

// Plan returns, for due targets at now, the notifications of all their due
// occurrences (in target order, then occurrence order) and one Advance per
// target (advances[i] belongs to due[i]).
func (p Planner) Plan(due []Target, now time.Time) (notes []Notification, advances []Advance) {
	notes = make([]Notification, 0, len(due))
	advances = make([]Advance, len(due))
	for i, t := range due {
		a := t.Advance(now, p.Policy)
		advances[i] = a
		for _, at := range a.Occurrences {
			notes = append(notes, NewNotification(t, at, now))
		}
	}
	return notes, advances
}

// ClaimResult says what one claim transaction did.
type ClaimResult struct {
	// Targets is the number of due targets claimed (and advanced).
	Targets int
	// Inserted is the number of new outbox rows; occurrences that were
	// already in the outbox (claimed by an overlapping scanner) are not
	// counted.
	Inserted int
	// Truncated is the number of targets whose catch-up was capped.
	Truncated int
	// Broken is the number of targets whose stored schedule no longer
	// parses; they are paused.
	Broken int
}

package domain

import "time"

// Planner turns the due targets of one claim into their due occurrences
// and next states.
type Planner struct {
	Policy MissedPolicy
}

// Plan returns one Advance per due target at now (advances[i] belongs to
// due[i]); the occurrences to store are the advances' Occurrences, in
// target order, then occurrence order.
func (p Planner) Plan(due []Target, now time.Time) []Advance {
	advances := make([]Advance, len(due))
	for i, t := range due {
		advances[i] = t.Advance(now, p.Policy)
	}
	return advances
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

// ClaimCursor is the position of the last target a claim took in
// (next_run_at, id) order. A scan passes it to its next claim so that the
// next SELECT starts there instead of stepping again over the index
// entries the previous claims just changed (InnoDB keeps them, delete
// marked, until purge). The zero value starts from the beginning; every
// scan does, so a target skipped by a cursor (created due in the past while
// a scan ran, or locked by an API request) is claimed by the next one.
type ClaimCursor struct {
	NextRunAt time.Time
	ID        int64
}

// IsZero reports whether c starts from the beginning.
func (c ClaimCursor) IsZero() bool { return c.ID == 0 }

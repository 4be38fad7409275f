package domain

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Status is the outcome of one dispatch as stored in the notifications
// table.
type Status string

// Statuses. StatusDuplicate only appears on incoming results: a stored row
// never says "duplicate" (see Merge).
const (
	StatusDelivered   Status = "delivered"
	StatusFailed      Status = "failed"
	StatusRateLimited Status = "rate_limited"
	// StatusCancelled: not sent, its target was changed after the
	// occurrence was claimed (the target fence).
	StatusCancelled Status = "cancelled"
	StatusDuplicate Status = "duplicate"
	// StatusUnknown is stored when the only result seen is a duplicate
	// that does not say what the first dispatch recorded.
	StatusUnknown Status = "unknown"
)

// MaxErrorRunes is the longest provider error text kept; longer texts are
// cut (the column is VARCHAR(1024)). An error message is a diagnostic, so
// cutting it is better than refusing the result.
const MaxErrorRunes = 1024

// ErrRejected marks a write the store refused because of the data in it
// (a value too long for its column, an invalid value). Retrying cannot
// help; the row is poison.
var ErrRejected = errors.New("rejected by the store")

// Result is one NotificationDispatched event: the outcome of one dispatch
// attempt of one notification.
type Result struct {
	NotificationID string
	TargetID       uint64
	OccurrenceAt   time.Time
	RecipientID    string
	Sequence       uint64
	Channel        string
	TemplateID     string
	// TemplateVersion names the template text the body was rendered with.
	TemplateVersion string
	Status          Status
	// OriginalStatus is set on duplicate results: what the first dispatch
	// of the notification recorded.
	OriginalStatus Status
	Attempts       uint32
	ProviderCode   int32
	Error          string
	Body           string
	RunID          string
	DueAt          time.Time
	DispatchedAt   time.Time
}

// Validate reports a result the sink cannot store at all: without a
// notification id there is nothing to deduplicate on, and an unknown status
// would be stored as a lie.
func (r *Result) Validate() error {
	if r.NotificationID == "" {
		return errors.New("notification id is empty")
	}
	switch r.Status {
	case StatusDelivered, StatusFailed, StatusRateLimited, StatusCancelled, StatusDuplicate:
	default:
		return errors.New("status is unspecified or unknown")
	}
	for _, t := range [...]time.Time{r.OccurrenceAt, r.DueAt, r.DispatchedAt} {
		if y := t.Year(); y < minYear || y > maxYear {
			return fmt.Errorf("time %s is outside what the store can hold (years %d-%d)", t.Format(time.RFC3339Nano), minYear, maxYear)
		}
	}
	return nil
}

// The DATETIME range of MySQL.
const (
	minYear = 1000
	maxYear = 9999
)

// Row is what the sink writes for one notification: the newest real result
// seen plus how many duplicate results were seen. Sources lists the indexes
// of the batch records folded into it, so that a row the store rejects can
// be traced back to its records.
type Row struct {
	NotificationID  string
	TargetID        uint64
	OccurrenceAt    time.Time
	RecipientID     string
	Sequence        uint64
	Channel         string
	TemplateID      string
	TemplateVersion string
	Status          Status
	Attempts        uint32
	ProviderCode    int32
	Error           string
	Body            string
	RunID           string
	DueAt           time.Time
	DispatchedAt    time.Time
	// Duplicates counts the duplicate results folded into the row.
	Duplicates int
	// Provisional is true while the row only reflects duplicate results:
	// the first real result overwrites it whatever its time.
	Provisional bool

	Sources []int
}

// RowOf returns the row a single result writes when no row exists yet. A
// duplicate result writes its original status and counts itself.
func RowOf(r *Result) Row {
	row := Row{
		NotificationID:  r.NotificationID,
		TargetID:        r.TargetID,
		OccurrenceAt:    r.OccurrenceAt,
		RecipientID:     r.RecipientID,
		Sequence:        r.Sequence,
		Channel:         r.Channel,
		TemplateID:      r.TemplateID,
		TemplateVersion: r.TemplateVersion,
		Status:          r.Status,
		Attempts:        r.Attempts,
		ProviderCode:    r.ProviderCode,
		Error:           truncateRunes(r.Error, MaxErrorRunes),
		Body:            r.Body,
		RunID:           r.RunID,
		DueAt:           r.DueAt,
		DispatchedAt:    r.DispatchedAt,
	}
	if r.Status == StatusDuplicate {
		row.Status = r.OriginalStatus
		if row.Status == "" || row.Status == StatusDuplicate {
			row.Status = StatusUnknown
		}
		row.Duplicates = 1
		row.Provisional = true
	}
	return row
}

// Merge returns the row that results from applying incoming on top of
// stored. The rule, which the SQL upsert implements too:
//
//   - Duplicates add up.
//   - A provisional incoming row (only duplicates) never changes the
//     outcome columns.
//   - A real incoming row replaces the outcome (status, attempts, provider
//     code, error, body, dispatched time) when the stored row is
//     provisional or when its dispatched time is the same as or later than
//     the stored one: an older attempt never overwrites a newer one, and a
//     redelivered result rewrites the same values (idempotent).
//   - The identity columns (target, occurrence, recipient, channel,
//     template, sequence, run, due time) never change.
func Merge(stored, incoming Row) Row {
	out := stored
	out.Duplicates = stored.Duplicates + incoming.Duplicates
	out.Sources = append(slices.Clip(stored.Sources), incoming.Sources...)
	if incoming.Provisional {
		return out
	}
	if stored.Provisional || !incoming.DispatchedAt.Before(stored.DispatchedAt) {
		out.Status = incoming.Status
		out.Attempts = incoming.Attempts
		out.ProviderCode = incoming.ProviderCode
		out.Error = incoming.Error
		out.Body = incoming.Body
		out.TemplateVersion = incoming.TemplateVersion
		out.DispatchedAt = incoming.DispatchedAt
		out.Provisional = false
	}
	return out
}

// Collapse folds a batch of results into one row per notification id with
// Merge, in batch order, so that one INSERT never names the same key twice.
// Rows come out sorted by notification id: concurrent flushes then lock
// keys in the same order, which keeps deadlocks between them rare.
func Collapse(results []*Result) []Row {
	rows := make([]Row, 0, len(results))
	index := make(map[string]int, len(results))
	// One backing array for the common case of one source per row; Merge
	// copies on append (the slices are clipped).
	sources := make([]int, len(results))
	for i, res := range results {
		r := RowOf(res)
		sources[i] = i
		r.Sources = sources[i : i+1 : i+1]
		if at, ok := index[r.NotificationID]; ok {
			rows[at] = Merge(rows[at], r)
			continue
		}
		index[r.NotificationID] = len(rows)
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b Row) int { return strings.Compare(a.NotificationID, b.NotificationID) })
	return rows
}

// truncateRunes cuts s to at most n runes.
func truncateRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	count := 0
	for i := range s {
		if count == n {
			return s[:i]
		}
		count++
	}
	return s
}

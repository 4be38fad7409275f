package adapters

import (
	"context"
	"database/sql"

	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
	"github.com/notiflow/notiflow/services/sink/notifications"
)

// Persisted reads and deletes the rows the sink persisted for a run,
// through the sink's package notifications, which owns the table (in the
// scheduler's database; a missing table reads as no rows). It is safe for
// concurrent use.
type Persisted struct {
	runs *notifications.Runs
}

// NewPersisted returns the reader over db (a go-sql-driver pool with
// parseTime and loc=UTC).
func NewPersisted(db *sql.DB) *Persisted { return &Persisted{runs: notifications.NewRuns(db)} }

// span selects rng's rows: by target id range alone when the range is the
// run's only, else also by run id.
func span(rng domain.TargetRange) notifications.Span {
	sp := notifications.Span{FromTarget: rng.MinID, ToTarget: rng.MaxID}
	if !rng.Exclusive {
		sp.RunID = rng.RunID
	}
	return sp
}

// Count returns how many of the run's rows the sink persisted (a progress
// sample, read uncommitted).
func (p *Persisted) Count(ctx context.Context, rng domain.TargetRange) (int64, error) {
	return p.runs.Count(ctx, span(rng))
}

// Rows returns the run's committed rows, for the report.
func (p *Persisted) Rows(ctx context.Context, rng domain.TargetRange) ([]domain.Row, error) {
	rs, err := p.runs.Rows(ctx, span(rng))
	if err != nil {
		return nil, err
	}
	out := make([]domain.Row, len(rs))
	for i, r := range rs {
		out[i] = domain.Row{Occurrence: domain.Occurrence{TargetID: r.TargetID, OccurrenceUS: r.OccurrenceAt.UnixMicro()},
			DueAt: r.DueAt, DispatchedAt: r.DispatchedAt, PersistedAt: r.PersistedAt}
	}
	return out, nil
}

// Delete deletes the run's rows (rows the sink writes afterwards stay).
func (p *Persisted) Delete(ctx context.Context, rng domain.TargetRange) error {
	return p.runs.Delete(ctx, span(rng))
}

package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// TargetStore persists targets.
type TargetStore interface {
	// CreateTargets inserts all targets or none and returns their ids.
	CreateTargets(ctx context.Context, targets []domain.Target) ([]int64, error)
	GetTarget(ctx context.Context, id int64) (domain.Target, error)
	ListTargets(ctx context.Context, afterID int64, limit int) ([]domain.Target, error)
	// UpdateTarget applies change to the locked target and stores the
	// result's status and next run.
	UpdateTarget(ctx context.Context, id int64, change func(domain.Target) (domain.Target, error)) (domain.Target, error)
}

// TargetInput is a target as a client describes it. Exactly one of DueAt
// and Cron must be set; TimeZone applies to Cron only ("" means UTC).
type TargetInput struct {
	RecipientID string
	Channel     string
	WebhookURL  string
	TemplateID  string
	Params      []byte
	DueAt       *time.Time
	Cron        string
	TimeZone    string
}

// BulkError says which target of a bulk request is invalid.
type BulkError struct {
	Index int
	Err   *domain.ValidationError
}

func (e *BulkError) Error() string {
	return fmt.Sprintf("targets[%d].%s: %s", e.Index, e.Err.Field, e.Err.Msg)
}

func (e *BulkError) Unwrap() error { return e.Err }

// ErrTooMany: a bulk request over the configured maximum.
var ErrTooMany = errors.New("too many targets in one request")

// Targets is the use-case layer of the targets API. It is safe for
// concurrent use.
type Targets struct {
	store   TargetStore
	limits  domain.Limits
	bulkMax int
	clock   func() time.Time
}

// NewTargets returns the targets service; bulk requests carry at most
// bulkMax targets.
func NewTargets(store TargetStore, limits domain.Limits, bulkMax int, clock func() time.Time) *Targets {
	if clock == nil {
		clock = time.Now
	}
	return &Targets{store: store, limits: limits, bulkMax: bulkMax, clock: clock}
}

// BulkMax is the most targets one bulk request may carry.
func (s *Targets) BulkMax() int { return s.bulkMax }

// Build validates in and returns the target it describes, active, with its
// first run computed from now. Errors are *domain.ValidationError.
func (s *Targets) Build(in TargetInput, now time.Time) (domain.Target, error) {
	var sched domain.Schedule
	switch {
	case in.DueAt != nil && in.Cron != "":
		return domain.Target{}, &domain.ValidationError{Field: "schedule", Msg: "give either due_at or cron, not both"}
	case in.DueAt == nil && in.Cron == "":
		return domain.Target{}, &domain.ValidationError{Field: "schedule", Msg: "give either due_at or cron"}
	case in.DueAt != nil:
		if in.TimeZone != "" {
			return domain.Target{}, &domain.ValidationError{Field: "time_zone", Msg: "applies to cron schedules only (due_at carries its own offset)"}
		}
		if in.DueAt.IsZero() {
			return domain.Target{}, &domain.ValidationError{Field: "due_at", Msg: "must be a time"}
		}
		sched = domain.OneShot(*in.DueAt)
	default:
		var err error
		sched, err = domain.ParseCron(in.Cron, in.TimeZone)
		switch {
		case errors.Is(err, domain.ErrBadTimeZone):
			return domain.Target{}, &domain.ValidationError{Field: "time_zone", Msg: err.Error()}
		case err != nil:
			return domain.Target{}, &domain.ValidationError{Field: "cron", Msg: err.Error()}
		}
	}
	t, err := domain.NewTarget(in.RecipientID, domain.Channel(in.Channel), in.WebhookURL, in.TemplateID, in.Params, sched, now, s.limits)
	if err != nil {
		return domain.Target{}, err
	}
	t.CreatedAt, t.UpdatedAt = now, now
	return t, nil
}

// Create validates and stores one target.
func (s *Targets) Create(ctx context.Context, in TargetInput) (domain.Target, error) {
	now := s.clock().UTC().Truncate(time.Microsecond)
	t, err := s.Build(in, now)
	if err != nil {
		return domain.Target{}, err
	}
	ids, err := s.store.CreateTargets(ctx, []domain.Target{t})
	if err != nil {
		return domain.Target{}, err
	}
	t.ID = ids[0]
	return t, nil
}

// CreateBulk validates every input and stores them all in one transaction,
// or stores nothing: the first invalid input is reported as a *BulkError,
// more than BulkMax inputs as ErrTooMany.
func (s *Targets) CreateBulk(ctx context.Context, ins []TargetInput) ([]int64, error) {
	if len(ins) > s.bulkMax {
		return nil, fmt.Errorf("%w: %d targets, the limit is %d", ErrTooMany, len(ins), s.bulkMax)
	}
	now := s.clock().UTC().Truncate(time.Microsecond)
	targets := make([]domain.Target, len(ins))
	for i, in := range ins {
		t, err := s.Build(in, now)
		if err != nil {
			var ve *domain.ValidationError
			if errors.As(err, &ve) {
				return nil, &BulkError{Index: i, Err: ve}
			}
			return nil, err
		}
		targets[i] = t
	}
	return s.CreateMany(ctx, targets, "")
}

// CreateMany stores already built targets (see Build) in one transaction,
// tagged with runID when it is not empty. It is the last step of
// CreateBulk and the path benchmark runs create their targets by
// (Runs.Create); it applies no count limit.
func (s *Targets) CreateMany(ctx context.Context, targets []domain.Target, runID string) ([]int64, error) {
	if len(runID) > domain.MaxRunIDLen {
		return nil, &domain.ValidationError{Field: "run_id", Msg: fmt.Sprintf("longer than %d bytes", domain.MaxRunIDLen)}
	}
	if runID != "" {
		for i := range targets {
			targets[i].RunID = runID
		}
	}
	return s.store.CreateTargets(ctx, targets)
}

// Get returns a target (domain.ErrNotFound when missing or deleted).
func (s *Targets) Get(ctx context.Context, id int64) (domain.Target, error) {
	return s.store.GetTarget(ctx, id)
}

// List returns up to limit targets after the id cursor, and the cursor of
// the next page (0 when this is the last page).
func (s *Targets) List(ctx context.Context, after int64, limit int) ([]domain.Target, int64, error) {
	ts, err := s.store.ListTargets(ctx, after, limit+1)
	if err != nil {
		return nil, 0, err
	}
	if len(ts) > limit {
		ts = ts[:limit]
		return ts, ts[limit-1].ID, nil
	}
	return ts, 0, nil
}

// Pause stops a target from firing until it is resumed.
func (s *Targets) Pause(ctx context.Context, id int64) (domain.Target, error) {
	now := s.clock().UTC().Truncate(time.Microsecond)
	return s.store.UpdateTarget(ctx, id, func(t domain.Target) (domain.Target, error) { return t.Pause(now) })
}

// Resume re-activates a paused target, computing its next run from now.
func (s *Targets) Resume(ctx context.Context, id int64) (domain.Target, error) {
	now := s.clock().UTC().Truncate(time.Microsecond)
	return s.store.UpdateTarget(ctx, id, func(t domain.Target) (domain.Target, error) { return t.Resume(now) })
}

// Delete marks a target deleted.
func (s *Targets) Delete(ctx context.Context, id int64) error {
	now := s.clock().UTC().Truncate(time.Microsecond)
	_, err := s.store.UpdateTarget(ctx, id, func(t domain.Target) (domain.Target, error) { return t.Delete(now) })
	return err
}

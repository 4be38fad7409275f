package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// RunStore is what benchmark runs need of the store besides
// TargetStore.CreateTargets.
type RunStore interface {
	// ReleaseRun makes the run's held (paused) one-shots active, due at
	// at, and queues them, committing in chunks; it returns their number.
	ReleaseRun(ctx context.Context, rng domain.TargetRange, at, now time.Time) (int64, error)
	// SampleRunOutbox counts the run's outbox rows and those published
	// (a sample: uncommitted rows may be counted).
	SampleRunOutbox(ctx context.Context, rng domain.TargetRange) (RunOutbox, error)
	// RunOutboxReport returns, committed, the number of the run's outbox
	// rows and their latest created_at.
	RunOutboxReport(ctx context.Context, rng domain.TargetRange) (int64, time.Time, error)
	// DeleteRun deletes the run's queue entries, targets and outbox rows
	// (but the row at the relay cursor).
	DeleteRun(ctx context.Context, rng domain.TargetRange) error
}

// RunOutbox is a sample of a benchmark run's progress through the outbox.
type RunOutbox struct {
	Rows      int64
	Published int64
	// RelayUpdatedAt is when the relay cursor last moved.
	RelayUpdatedAt time.Time
}

// RunSpec describes the targets of benchmark run RunID: N targets, the
// i-th as Input(i) describes it (for i in 0..N-1).
type RunSpec struct {
	RunID string
	N     int
	Input func(i int) TargetInput
	// WebhookSecret, when set, is the signing secret every webhook target
	// of the run gets instead of a generated one (see CreateMany).
	WebhookSecret string
}

// CreatedRun says what Runs.Create stored.
type CreatedRun struct {
	Range       domain.TargetRange
	Count       int64
	DueAt       time.Time
	CommittedAt time.Time
}

// Runs creates, observes and deletes the targets of benchmark runs. Their
// targets are validated and stored by the code path of the API's bulk
// create, so a benchmark measures what users run. It is safe for
// concurrent use.
type Runs struct {
	targets *Targets
	store   RunStore
}

// NewRuns returns the service over targets (whose store must be store).
func NewRuns(targets *Targets, store RunStore) *Runs {
	return &Runs{targets: targets, store: store}
}

// Create stores spec's targets and makes them due together at one instant,
// in two steps so that none falls due early however long creating takes:
//
//  1. the inputs are validated (Targets.Build) and stored through
//     CreateMany, BulkMax targets per transaction (one bulk request's
//     worth: no transaction outgrows the database's lock table), held:
//     paused, so not queued;
//  2. decide gets the time step 1 took and returns the due time; the
//     targets are then released (made active and queued) at that time,
//     in chunks. decide must leave room for the release, which commits
//     chunk by chunk: a target whose chunk commits after its due time
//     fires late.
//
// The inputs' own due times are replaced by decide's. When a step fails
// (ctx ended included), the run's targets created so far are deleted (held
// ones never fired) and the error is returned.
func (r *Runs) Create(ctx context.Context, spec RunSpec, decide func(elapsed time.Duration) time.Time) (CreatedRun, error) {
	start := time.Now()
	out, err := r.create(ctx, spec, start, decide)
	if err != nil {
		if derr := r.store.DeleteRun(context.WithoutCancel(ctx), domain.TargetRange{RunID: spec.RunID}); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete the targets created so far: %w", derr))
		}
		return CreatedRun{}, fmt.Errorf("create the targets of benchmark run %s: %w", spec.RunID, err)
	}
	return out, nil
}

func (r *Runs) create(ctx context.Context, spec RunSpec, start time.Time, decide func(time.Duration) time.Time) (CreatedRun, error) {
	var out CreatedRun
	chunk := r.targets.BulkMax()
	batch := make([]domain.Target, 0, min(chunk, spec.N))
	for off := 0; off < spec.N; off += chunk {
		now := r.targets.clock().UTC().Truncate(time.Microsecond)
		batch = batch[:0]
		for i := off; i < min(off+chunk, spec.N); i++ {
			t, err := r.targets.Build(spec.Input(i), now)
			if err != nil {
				return out, fmt.Errorf("target %d: %w", i, err)
			}
			t.Status = domain.StatusPaused // held until step 2
			if t.Channel == domain.ChannelWebhook {
				t.WebhookSecret = spec.WebhookSecret
			}
			batch = append(batch, t)
		}
		ids, err := r.targets.CreateMany(ctx, batch, spec.RunID)
		if err != nil {
			return out, fmt.Errorf("targets %d..%d: %w", off, off+len(batch)-1, err)
		}
		for _, id := range ids {
			if out.Range.MinID == 0 || uint64(id) < out.Range.MinID {
				out.Range.MinID = uint64(id)
			}
			out.Range.MaxID = max(out.Range.MaxID, uint64(id))
		}
		out.Count += int64(len(ids))
	}
	out.Range.RunID = spec.RunID
	// Ids are unique: when the run's ids fill its range, no other target
	// has, or will ever get, an id in it. (Bulk inserts get consecutive
	// ids; a target another client created between two transactions, or an
	// auto_increment_increment above 1, leaves the range shared.)
	out.Range.Exclusive = out.Count > 0 && out.Range.MaxID-out.Range.MinID+1 == uint64(out.Count)
	out.DueAt = decide(time.Since(start))
	now := r.targets.clock().UTC().Truncate(time.Microsecond)
	released, err := r.store.ReleaseRun(ctx, out.Range, out.DueAt, now)
	if err != nil {
		return out, err
	}
	if released != out.Count {
		return out, fmt.Errorf("released %d of %d targets (some were changed meanwhile)", released, out.Count)
	}
	out.CommittedAt = time.Now()
	return out, nil
}

// Check validates one target input as the API's create does (Targets.Build,
// then Targets.CheckTarget: template, and a webhook URL's destination
// against the guard), storing nothing. A run whose targets differ only by
// recipient checks one before Create, which skips CheckTarget. Errors are
// *domain.ValidationError, or the template store's failure.
func (r *Runs) Check(ctx context.Context, in TargetInput) error {
	t, err := r.targets.Build(in, r.targets.clock().UTC().Truncate(time.Microsecond))
	if err != nil {
		return err
	}
	return r.targets.CheckTarget(ctx, t)
}

// SampleOutbox counts the run's outbox rows and those the relay published
// (a progress sample).
func (r *Runs) SampleOutbox(ctx context.Context, rng domain.TargetRange) (RunOutbox, error) {
	return r.store.SampleRunOutbox(ctx, rng)
}

// OutboxReport returns, committed, the number of the run's outbox rows and
// the latest of their creation times.
func (r *Runs) OutboxReport(ctx context.Context, rng domain.TargetRange) (int64, time.Time, error) {
	return r.store.RunOutboxReport(ctx, rng)
}

// Delete deletes the run's due-queue entries, targets and outbox rows (see
// RunStore.DeleteRun); rows written afterwards by records in flight stay.
func (r *Runs) Delete(ctx context.Context, rng domain.TargetRange) error {
	return r.store.DeleteRun(ctx, rng)
}

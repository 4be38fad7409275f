package adapters_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
	scheduleradapters "github.com/notiflow/notiflow/services/scheduler/internal/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
)

// open returns the scheduler's store (migrated) on a database of the test's
// own, and the benchmark store over the same pool.
func open(t *testing.T) (*scheduleradapters.MySQLStore, *adapters.Store) {
	t.Helper()
	ctx := context.Background()
	s, err := scheduleradapters.OpenMySQL(ctx, testkit.MySQLDSN(t), 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s, adapters.NewStore(s.DB())
}

func TestRunLifecycle(t *testing.T) {
	t.Parallel()
	sched, store := open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	two := 2
	run := domain.Run{ID: "11111111-1111-4111-8111-111111111111", Status: domain.StatusCreating, CreatedAt: now, DueAt: now.Add(5 * time.Second),
		Params: domain.Params{Notifications: 10, Recipients: 2, Channel: "sim", SimLatencyMs: &two}}
	if err := store.InsertRun(ctx, run, "replica-a"); err != nil {
		t.Fatal(err)
	}
	second := run
	second.ID, second.CreatedAt = "22222222-2222-4222-8222-222222222222", now.Add(time.Second)
	if err := store.InsertRun(ctx, second, "replica-b"); !errors.Is(err, domain.ErrBusy) {
		t.Fatalf("second active run: %v, want ErrBusy", err)
	}
	active, err := store.ActiveRun(ctx)
	if err != nil || active.Run.ID != run.ID || active.Owner != "replica-a" {
		t.Fatalf("active = %+v, %v", active, err)
	}
	rng := domain.TargetRange{RunID: run.ID, MinID: 5, MaxID: 14, Exclusive: true}
	if ok, err := store.MarkWaiting(ctx, run.ID, rng, 10, run.DueAt, 0.25); err != nil || !ok {
		t.Fatalf("mark waiting: %v %v", ok, err)
	}
	if ok, err := store.MarkWaiting(ctx, run.ID, rng, 10, run.DueAt, 0.25); err != nil || ok {
		t.Fatalf("mark waiting twice: %v %v, want false", ok, err)
	}
	p := domain.Progress{TargetsCreated: 10, OutboxRows: 10, Published: 7}
	if ok, err := store.SaveProgress(ctx, run.ID, domain.StatusRunning, p); err != nil || !ok {
		t.Fatalf("save progress: %v %v", ok, err)
	}
	got, err := store.GetRun(ctx, run.ID)
	if err != nil || got.Run.Status != domain.StatusRunning || got.Run.Progress != p || got.Targets != rng || got.Run.SetupSec != 0.25 ||
		*got.Run.Params.SimLatencyMs != 2 || !got.Run.DueAt.Equal(run.DueAt) || got.Run.Report != nil {
		t.Fatalf("get = %+v, %v", got, err)
	}
	rep := domain.ComputeReport(domain.ReportInput{DueAt: run.DueAt, Eligible: 10, Groups: []string{"g"}})
	if ok, err := store.Finish(ctx, run.ID, domain.StatusDone, p, &rep, "", now.Add(time.Minute)); err != nil || !ok {
		t.Fatalf("finish: %v %v", ok, err)
	}
	if ok, err := store.Cancel(ctx, run.ID, now); err != nil || ok {
		t.Fatalf("cancel a finished run: %v %v, want false", ok, err)
	}
	got, err = store.GetRun(ctx, run.ID)
	if err != nil || got.Run.Status != domain.StatusDone || got.Run.Report == nil || got.Run.Report.Lost != 10 || got.Run.FinishedAt == nil {
		t.Fatalf("finished run = %+v, %v", got.Run, err)
	}
	// The slot is free again; a stale run of another owner is reaped, a
	// fresh one or our own is not.
	if err := store.InsertRun(ctx, second, "replica-b"); err != nil {
		t.Fatal(err)
	}
	if n, err := store.ReapStale(ctx, time.Minute, "replica-a", now); err != nil || n != 0 {
		t.Fatalf("reap fresh: %d %v", n, err)
	}
	if _, err := sched.DB().ExecContext(ctx, `UPDATE benchmark_runs SET heartbeat_at = UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE WHERE id = ?`, second.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := store.ReapStale(ctx, time.Minute, "replica-b", now); err != nil || n != 0 {
		t.Fatalf("reap own: %d %v", n, err)
	}
	if n, err := store.ReapStale(ctx, time.Minute, "replica-a", now); err != nil || n != 1 {
		t.Fatalf("reap stale: %d %v", n, err)
	}
	if _, err := store.ActiveRun(ctx); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("active after reap: %v", err)
	}
	runs, err := store.ListRuns(ctx, 10, false)
	if err != nil || len(runs) != 2 || runs[0].ID != second.ID || runs[0].Status != domain.StatusFailed || runs[1].Report != nil {
		t.Fatalf("list = %+v, %v", runs, err)
	}
	if _, err := store.GetRun(ctx, "33333333-3333-4333-8333-333333333333"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
}

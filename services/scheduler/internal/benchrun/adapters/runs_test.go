package adapters_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
	scheduleradapters "github.com/notiflow/notiflow/services/scheduler/internal/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/benchtest"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
	schedulerdomain "github.com/notiflow/notiflow/services/scheduler/internal/domain"
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

func keep(due time.Time) func(time.Duration) time.Time {
	return func(time.Duration) time.Time { return due }
}

func spec(runID string, n, recipients int) adapters.TargetSpec {
	return adapters.TargetSpec{
		RunID: runID, N: n, Recipients: recipients, Prefix: domain.RecipientPrefix(runID), Channel: "sim",
		Template: domain.Template, Params: []byte(`{"_sim_latency_ms":3}`), CreatedAt: time.Now().UTC().Truncate(time.Microsecond),
	}
}

func TestCreateTargets(t *testing.T) {
	t.Parallel()
	sched, store := open(t)
	ctx := context.Background()
	due := time.Now().UTC().Add(time.Hour).Truncate(time.Microsecond)
	// 25,000 targets: three INSERT … SELECT statements, the last partial.
	got, err := store.CreateTargets(ctx, spec("run-a", 25000, 700), due, keep(due))
	if err != nil {
		t.Fatal(err)
	}
	if got.Count != 25000 || !got.DueAt.Equal(due) || !got.Range.Exclusive || got.Range.MaxID < got.Range.MinID {
		t.Fatalf("created = %+v", got)
	}
	var n, recipients, wrongDue, span int64
	var minRecipient, maxRecipient, params, channel, tmpl, kind, status string
	err = sched.DB().QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT recipient_id), SUM(next_run_at <> ? OR due_at <> ?),
			MAX(id) - MIN(id) + 1, MIN(recipient_id), MAX(recipient_id), MAX(params), MAX(channel), MAX(template_id),
			MAX(schedule_kind), MAX(status)
		FROM notification_targets WHERE run_id = ?`, due, due, "run-a").
		Scan(&n, &recipients, &wrongDue, &span, &minRecipient, &maxRecipient, &params, &channel, &tmpl, &kind, &status)
	if err != nil {
		t.Fatal(err)
	}
	if n != 25000 || recipients != 700 || wrongDue != 0 {
		t.Errorf("rows %d, distinct recipients %d, wrong due times %d", n, recipients, wrongDue)
	}
	if minRecipient != "bench-run-a-0" || maxRecipient != "bench-run-a-99" || params != `{"_sim_latency_ms":3}` ||
		channel != "sim" || tmpl != "bench" || kind != "once" || status != "active" {
		t.Errorf("recipients %s..%s params %s channel %s template %s kind %s status %s", minRecipient, maxRecipient, params, channel, tmpl, kind, status)
	}
	// The stored targets read back through the scheduler's own store.
	tg, err := sched.GetTarget(ctx, int64(got.Range.MinID))
	if err != nil || tg.Schedule.Kind() != schedulerdomain.KindOnce || !tg.NextRunAt.Equal(due) || tg.RunID != "run-a" {
		t.Fatalf("target %d = %+v, %v", got.Range.MinID, tg, err)
	}
}

func TestCreateTargetsMovesTheDueTimeBeforeCommit(t *testing.T) {
	t.Parallel()
	sched, store := open(t)
	ctx := context.Background()
	planned := time.Now().UTC().Truncate(time.Microsecond)
	moved := planned.Add(time.Minute)
	var elapsed time.Duration
	got, err := store.CreateTargets(ctx, spec("run-m", 1500, 10), planned, func(e time.Duration) time.Time { elapsed = e; return moved })
	if err != nil {
		t.Fatal(err)
	}
	if !got.DueAt.Equal(moved) || elapsed <= 0 {
		t.Fatalf("due %s (want %s), elapsed %s", got.DueAt, moved, elapsed)
	}
	var wrong int64
	if err := sched.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM notification_targets WHERE run_id = ? AND (next_run_at <> ? OR due_at <> ?)`,
		"run-m", moved, moved).Scan(&wrong); err != nil || wrong != 0 {
		t.Fatalf("%d targets not moved (%v)", wrong, err)
	}
}

func TestCreateTargetsRollsBackWhenCtxEnds(t *testing.T) {
	t.Parallel()
	sched, store := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	due := time.Now().UTC().Add(time.Hour)
	_, err := store.CreateTargets(ctx, spec("run-x", 30000, 10), due, func(time.Duration) time.Time { cancel(); return due })
	if err == nil {
		t.Fatal("want an error after ctx ended")
	}
	n, err := sched.CountTargets(context.Background(), "run-x")
	if err != nil || n != 0 {
		t.Fatalf("%d targets left (%v)", n, err)
	}
}

// claimAll claims every due target with the scheduler's own claim.
func claimAll(t *testing.T, sched *scheduleradapters.MySQLStore, now time.Time) {
	t.Helper()
	for {
		res, err := sched.ClaimDue(context.Background(), now, 1000, schedulerdomain.Planner{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Targets == 0 {
			return
		}
	}
}

func TestSampleCountsAndReportData(t *testing.T) {
	t.Parallel()
	sched, store := open(t)
	ctx := context.Background()
	due := time.Now().UTC().Add(-time.Second).Truncate(time.Microsecond)
	// A foreign target before and after the run's, so the range matters.
	other := spec("other", 1, 1)
	if _, err := store.CreateTargets(ctx, other, due, keep(due)); err != nil {
		t.Fatal(err)
	}
	created, err := store.CreateTargets(ctx, spec("run-c", 500, 50), due, keep(due))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreateTargets(ctx, other, due, keep(due)); err != nil {
		t.Fatal(err)
	}
	rng := created.Range

	// Before any claim, without the sink's table: zeros, no error.
	c, err := store.SampleCounts(ctx, rng, false)
	if err != nil || c.OutboxRows != 0 || c.Published != 0 || c.Persisted != 0 {
		t.Fatalf("counts = %+v, %v", c, err)
	}
	claimAll(t, sched, time.Now().UTC())
	// Publish part of the run: move the relay cursor to the 200th row of
	// the run.
	var cursor uint64
	if err := sched.DB().QueryRowContext(ctx, `SELECT id FROM outbox WHERE target_id BETWEEN ? AND ? ORDER BY id LIMIT 1 OFFSET 199`,
		rng.MinID, rng.MaxID).Scan(&cursor); err != nil {
		t.Fatal(err)
	}
	marked := time.Now().UTC().Truncate(time.Microsecond)
	if err := sched.MarkPublished(ctx, cursor, marked); err != nil {
		t.Fatal(err)
	}
	c, err = store.SampleCounts(ctx, rng, false)
	if err != nil || c.OutboxRows != 500 || c.Published != 200 || !c.RelayUpdatedAt.Equal(marked) {
		t.Fatalf("counts = %+v, %v; want 500 outbox rows, 200 published, cursor moved at %s", c, err, marked)
	}
	// The same range marked non-exclusive gives the same counts (run_id
	// is checked); an exclusive range one wider would count the foreign one.
	c2, err := store.SampleCounts(ctx, domain.TargetRange{RunID: "run-c", MinID: rng.MinID - 1, MaxID: rng.MaxID + 1}, false)
	if err != nil || c2.OutboxRows != 500 {
		t.Fatalf("non-exclusive counts = %+v, %v", c2, err)
	}
	c3, err := store.SampleCounts(ctx, domain.TargetRange{RunID: "run-c", MinID: rng.MinID - 1, MaxID: rng.MaxID + 1, Exclusive: true}, false)
	if err != nil || c3.OutboxRows != 501 {
		t.Fatalf("wider exclusive counts = %+v, %v (the test's premise is off)", c3, err)
	}

	// The sink persists 3 rows of the run and one row of another run; a
	// second row for an occurrence under another notification id is
	// refused by the primary key (INSERT IGNORE drops it).
	benchtest.CreateSinkTable(t, sched.DB())
	occ := func(i int) (uint64, time.Time) {
		var id uint64
		var at time.Time
		if err := sched.DB().QueryRowContext(ctx, `SELECT target_id, occurrence_at FROM outbox WHERE target_id BETWEEN ? AND ? ORDER BY id LIMIT 1 OFFSET ?`,
			rng.MinID, rng.MaxID, i).Scan(&id, &at); err != nil {
			t.Fatal(err)
		}
		return id, at
	}
	var rows []benchtest.Row
	for i := 0; i < 3; i++ {
		id, at := occ(i)
		rows = append(rows, benchtest.Row{NotificationID: fmt.Sprintf("n-%d", i), TargetID: id, OccurrenceAt: at, RecipientID: "r",
			RunID: "run-c", DueAt: due, DispatchedAt: due.Add(time.Duration(i+1) * time.Second), PersistedAt: due.Add(time.Duration(i+2) * time.Second)})
	}
	dup := rows[2]
	dup.NotificationID = "n-dup"
	rows = append(rows, dup, benchtest.Row{NotificationID: "n-other", TargetID: 1, OccurrenceAt: due, RecipientID: "r", RunID: "other", DueAt: due, DispatchedAt: due})
	if err := benchtest.InsertRows(ctx, sched.DB(), rows); err != nil {
		t.Fatal(err)
	}
	c, err = store.SampleCounts(ctx, rng, true)
	if err != nil || c.Persisted != 3 || c.OutboxRows != 0 {
		t.Fatalf("counts with skipOutbox = %+v, %v; want 3 persisted, outbox not counted", c, err)
	}
	outbox, last, got, err := store.ReportData(ctx, rng)
	if err != nil || outbox != 500 || last.IsZero() || len(got) != 3 {
		t.Fatalf("report data: outbox %d last %s rows %d, %v", outbox, last, len(got), err)
	}
	rep := domain.ComputeReport(domain.ReportInput{DueAt: due, Eligible: 500, OutboxCreated: outbox, LastOutboxAt: last, Rows: got})
	if rep.Lost != 497 || rep.DuplicatesPersisted != 0 || rep.Duplicates != 0 || rep.TotalSec != 4 || rep.LatencyMs.P50 != 3000 {
		t.Fatalf("report = lost %d dupPersisted %d dup %d total %v p50 %v", rep.Lost, rep.DuplicatesPersisted, rep.Duplicates, rep.TotalSec, rep.LatencyMs.P50)
	}

	// Deleting the run's rows leaves the other run's and the outbox row at
	// the relay cursor.
	if err := store.DeleteRunRows(ctx, rng); err != nil {
		t.Fatal(err)
	}
	var targets, outboxLeft, notes, otherTargets int64
	_ = sched.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM notification_targets WHERE run_id = 'run-c'`).Scan(&targets)
	_ = sched.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox WHERE target_id BETWEEN ? AND ?`, rng.MinID, rng.MaxID).Scan(&outboxLeft)
	_ = sched.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM notifications WHERE run_id = 'run-c'`).Scan(&notes)
	_ = sched.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM notification_targets WHERE run_id = 'other'`).Scan(&otherTargets)
	if targets != 0 || outboxLeft != 1 || notes != 0 || otherTargets != 2 {
		t.Fatalf("after delete: targets %d outbox %d (want the cursor row) notifications %d other targets %d", targets, outboxLeft, notes, otherTargets)
	}
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

// TestDeleteRunRowsDequeuesUnclaimedTargets: the targets of a run deleted
// before they came due leave no due-queue entry behind (the claim would
// otherwise fire them from the entry), and another run's entries stay.
func TestDeleteRunRowsDequeuesUnclaimedTargets(t *testing.T) {
	t.Parallel()
	sched, store := open(t)
	ctx := context.Background()
	due := time.Now().UTC().Add(time.Hour).Truncate(time.Microsecond)
	if _, err := store.CreateTargets(ctx, spec("other", 3, 3), due, keep(due)); err != nil {
		t.Fatal(err)
	}
	created, err := store.CreateTargets(ctx, spec("run-d", 25_000, 100), due, keep(due))
	if err != nil {
		t.Fatal(err)
	}
	queued := func() (run, other int) {
		t.Helper()
		if err := sched.DB().QueryRowContext(ctx, `SELECT COALESCE(SUM(run_id = 'run-d'), 0), COALESCE(SUM(run_id = 'other'), 0)
			FROM target_due WHERE one_shot = 1`).Scan(&run, &other); err != nil {
			t.Fatal(err)
		}
		return run, other
	}
	if run, other := queued(); run != 25_000 || other != 3 {
		t.Fatalf("queued before: run %d other %d", run, other)
	}
	if err := store.DeleteRunRows(ctx, created.Range); err != nil {
		t.Fatal(err)
	}
	if run, other := queued(); run != 0 || other != 3 {
		t.Fatalf("queued after deleting the run: run %d other %d; want 0 and 3", run, other)
	}
}

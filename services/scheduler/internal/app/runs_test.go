package app_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/scheduler/internal/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// openRuns returns the store (migrated, on a database of the test's own)
// and the benchmark-run service over it, bulkMax targets per transaction.
func openRuns(t *testing.T, bulkMax int) (*adapters.MySQLStore, *app.Runs) {
	t.Helper()
	ctx := context.Background()
	s, err := adapters.OpenMySQL(ctx, testkit.MySQLDSN(t), 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s, app.NewRuns(app.NewTargets(s, domain.Limits{MaxParamsBytes: 1024}, bulkMax, nil), s)
}

func keep(due time.Time) func(time.Duration) time.Time {
	return func(time.Duration) time.Time { return due }
}

// runSpec describes n sim one-shots of run runID spread over the given
// number of recipients "bench-<run>-<i mod recipients>", due at due.
func runSpec(runID string, n, recipients int, due time.Time) app.RunSpec {
	return app.RunSpec{RunID: runID, N: n, Input: func(i int) app.TargetInput {
		return app.TargetInput{RecipientID: "bench-" + runID + "-" + strconv.Itoa(i%recipients), Channel: "sim",
			TemplateID: "bench", Params: []byte(`{"_sim_latency_ms":3}`), DueAt: &due}
	}}
}

// queued returns the number of due-queue entries of run runID.
func queued(t *testing.T, s *adapters.MySQLStore, runID string) int64 {
	t.Helper()
	var n int64
	if err := s.DB().QueryRowContext(context.Background(), `SELECT COUNT(*) FROM target_due WHERE run_id = ?`, runID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRunsCreate(t *testing.T) {
	t.Parallel()
	sched, runs := openRuns(t, 10000)
	ctx := context.Background()
	due := time.Now().UTC().Add(time.Hour).Truncate(time.Microsecond)
	// 25,000 targets: three transactions of the bulk size, the last partial.
	got, err := runs.Create(ctx, runSpec("run-a", 25000, 700, due), keep(due))
	if err != nil {
		t.Fatal(err)
	}
	if got.Count != 25000 || !got.DueAt.Equal(due) || !got.Range.Exclusive || got.Range.MaxID < got.Range.MinID ||
		got.Range.RunID != "run-a" || got.CommittedAt.IsZero() {
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
	if n != 25000 || recipients != 700 || wrongDue != 0 || uint64(span) != got.Range.MaxID-got.Range.MinID+1 {
		t.Errorf("rows %d, distinct recipients %d, wrong due times %d, id span %d", n, recipients, wrongDue, span)
	}
	if minRecipient != "bench-run-a-0" || maxRecipient != "bench-run-a-99" || params != `{"_sim_latency_ms":3}` ||
		channel != "sim" || tmpl != "bench" || kind != "once" || status != "active" {
		t.Errorf("recipients %s..%s params %s channel %s template %s kind %s status %s", minRecipient, maxRecipient, params, channel, tmpl, kind, status)
	}
	// Every target is queued at its due time, as the API's create queues it.
	if q := queued(t, sched, "run-a"); q != 25000 {
		t.Errorf("%d due-queue entries, want 25000", q)
	}
	// The stored targets read back through the store.
	tg, err := sched.GetTarget(ctx, int64(got.Range.MinID))
	if err != nil || tg.Schedule.Kind() != domain.KindOnce || !tg.NextRunAt.Equal(due) || tg.RunID != "run-a" || tg.Status != domain.StatusActive {
		t.Fatalf("target %d = %+v, %v", got.Range.MinID, tg, err)
	}
}

// TestRunsCreateMovesTheDueTimeBeforeRelease: decide sees the time spent
// while nothing of the run is queued yet (the targets are held), and the
// targets fall due at the time it returns.
func TestRunsCreateMovesTheDueTimeBeforeRelease(t *testing.T) {
	t.Parallel()
	sched, runs := openRuns(t, 1000)
	ctx := context.Background()
	planned := time.Now().UTC().Truncate(time.Microsecond)
	moved := planned.Add(time.Minute)
	var (
		elapsed           time.Duration
		held, queuedAtDue int64
	)
	got, err := runs.Create(ctx, runSpec("run-m", 1500, 10, planned), func(e time.Duration) time.Time {
		elapsed = e
		queuedAtDue = queued(t, sched, "run-m")
		_ = sched.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM notification_targets WHERE run_id = 'run-m' AND status = 'paused'`).Scan(&held)
		return moved
	})
	if err != nil {
		t.Fatal(err)
	}
	if !got.DueAt.Equal(moved) || elapsed <= 0 {
		t.Fatalf("due %s (want %s), elapsed %s", got.DueAt, moved, elapsed)
	}
	if queuedAtDue != 0 || held != 1500 {
		t.Fatalf("when deciding: %d queued, %d held; want 0 and 1500", queuedAtDue, held)
	}
	var wrong int64
	if err := sched.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM notification_targets WHERE run_id = ? AND (next_run_at <> ? OR due_at <> ? OR status <> 'active')`,
		"run-m", moved, moved).Scan(&wrong); err != nil || wrong != 0 {
		t.Fatalf("%d targets not moved (%v)", wrong, err)
	}
	var wrongQueue int64
	if err := sched.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM target_due WHERE run_id = ? AND (next_run_at <> ? OR one_shot <> 1)`,
		"run-m", moved).Scan(&wrongQueue); err != nil || wrongQueue != 0 || queued(t, sched, "run-m") != 1500 {
		t.Fatalf("%d queue entries not at the moved time (%v)", wrongQueue, err)
	}
}

// TestRunsCreateDeletesWhenCtxEnds: a run whose creation fails leaves no
// target behind, although its first transactions committed.
func TestRunsCreateDeletesWhenCtxEnds(t *testing.T) {
	t.Parallel()
	sched, runs := openRuns(t, 10000)
	ctx, cancel := context.WithCancel(context.Background())
	due := time.Now().UTC().Add(time.Hour)
	var before int64
	_, err := runs.Create(ctx, runSpec("run-x", 30000, 10, due), func(time.Duration) time.Time {
		before, _ = sched.CountTargets(context.Background(), "run-x")
		cancel()
		return due
	})
	if err == nil {
		t.Fatal("want an error after ctx ended")
	}
	if before != 30000 {
		t.Fatalf("%d targets committed before the release, want 30000 (the test's premise is off)", before)
	}
	n, err := sched.CountTargets(context.Background(), "run-x")
	if err != nil || n != 0 {
		t.Fatalf("%d targets left (%v)", n, err)
	}
}

// TestRunsCreateInvalidInput: an input the API would refuse fails the run
// with the validation error, and nothing stays.
func TestRunsCreateInvalidInput(t *testing.T) {
	t.Parallel()
	sched, runs := openRuns(t, 100)
	due := time.Now().UTC().Add(time.Hour)
	spec := runSpec("run-v", 250, 5, due)
	valid := spec.Input
	spec.Input = func(i int) app.TargetInput {
		in := valid(i)
		if i == 170 {
			in.Channel = "carrier-pigeon"
		}
		return in
	}
	_, err := runs.Create(context.Background(), spec, keep(due))
	var ve *domain.ValidationError
	if !errors.As(err, &ve) || ve.Field != "channel" {
		t.Fatalf("err = %v, want a channel validation error", err)
	}
	if n, err := sched.CountTargets(context.Background(), "run-v"); err != nil || n != 0 {
		t.Fatalf("%d targets left (%v)", n, err)
	}
}

// TestRunsDeleteDequeuesUnclaimedTargets: the targets of a run deleted
// before they came due leave no due-queue entry behind (the claim would
// otherwise fire them from the entry), and another run's entries stay.
func TestRunsDeleteDequeuesUnclaimedTargets(t *testing.T) {
	t.Parallel()
	sched, runs := openRuns(t, 10000)
	ctx := context.Background()
	due := time.Now().UTC().Add(time.Hour).Truncate(time.Microsecond)
	if _, err := runs.Create(ctx, runSpec("other", 3, 3, due), keep(due)); err != nil {
		t.Fatal(err)
	}
	created, err := runs.Create(ctx, runSpec("run-d", 25_000, 100, due), keep(due))
	if err != nil {
		t.Fatal(err)
	}
	count := func() (run, other int) {
		t.Helper()
		if err := sched.DB().QueryRowContext(ctx, `SELECT COALESCE(SUM(run_id = 'run-d'), 0), COALESCE(SUM(run_id = 'other'), 0)
			FROM target_due WHERE one_shot = 1`).Scan(&run, &other); err != nil {
			t.Fatal(err)
		}
		return run, other
	}
	if run, other := count(); run != 25_000 || other != 3 {
		t.Fatalf("queued before: run %d other %d", run, other)
	}
	if err := runs.Delete(ctx, created.Range); err != nil {
		t.Fatal(err)
	}
	if run, other := count(); run != 0 || other != 3 {
		t.Fatalf("queued after deleting the run: run %d other %d; want 0 and 3", run, other)
	}
	if n, err := sched.CountTargets(ctx, "run-d"); err != nil || n != 0 {
		t.Fatalf("%d targets of the deleted run left (%v)", n, err)
	}
}

// TestRunsCreateSharedRange: when another client creates a target while a
// run's targets are being created, the run's range is not exclusive, and
// the run's rows are then selected by run id too.
func TestRunsCreateSharedRange(t *testing.T) {
	t.Parallel()
	sched, runs := openRuns(t, 100)
	ctx := context.Background()
	due := time.Now().UTC().Add(time.Hour).Truncate(time.Microsecond)
	other := app.NewTargets(sched, domain.Limits{}, 100, nil)
	spec := runSpec("run-s", 250, 5, due)
	input := spec.Input
	spec.Input = func(i int) app.TargetInput {
		if i == 150 { // while its second transaction is built, after its first
			if _, err := other.Create(ctx, app.TargetInput{RecipientID: "someone", Channel: "inbox", TemplateID: "t", DueAt: &due}); err != nil {
				t.Error(err)
			}
		}
		return input(i)
	}
	got, err := runs.Create(ctx, spec, keep(due))
	if err != nil || got.Count != 250 || got.Range.Exclusive || got.Range.MaxID-got.Range.MinID+1 != 251 {
		t.Fatalf("created = %+v, %v; want 250 targets over a shared range of 251 ids", got, err)
	}
	exclusive, err := runs.Create(ctx, runSpec("run-e", 250, 5, due), keep(due))
	if err != nil || !exclusive.Range.Exclusive {
		t.Fatalf("created alone = %+v, %v; want an exclusive range", exclusive, err)
	}
}

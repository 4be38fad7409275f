package adapters_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	scheduleradapters "github.com/notiflow/notiflow/services/scheduler/internal/adapters"
	schedulerapp "github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/benchtest"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
	schedulerdomain "github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

func keep(due time.Time) func(time.Duration) time.Time {
	return func(time.Duration) time.Time { return due }
}

// runs returns the scheduler's benchmark-run service over sched.
func runs(sched *scheduleradapters.MySQLStore) *schedulerapp.Runs {
	return schedulerapp.NewRuns(schedulerapp.NewTargets(sched, schedulerdomain.Limits{}, 10000, nil), sched)
}

// spec describes n sim targets of run runID over the given number of
// recipients, due at due.
func spec(runID string, n, recipients int, due time.Time) schedulerapp.RunSpec {
	return schedulerapp.RunSpec{RunID: runID, N: n, Input: func(i int) schedulerapp.TargetInput {
		return schedulerapp.TargetInput{RecipientID: domain.RecipientPrefix(runID) + strconv.Itoa(i%recipients), Channel: "sim",
			TemplateID: domain.Template, Params: []byte(`{"_sim_latency_ms":3}`), DueAt: &due}
	}}
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

// TestSampleCountsAndReportData checks what the watcher reads of a run:
// the outbox counts through the scheduler's app.Runs and the sink's rows
// through Persisted, the report computed from them, and the deletion of the
// run's rows.
func TestSampleCountsAndReportData(t *testing.T) {
	t.Parallel()
	sched, _ := open(t)
	rt, persisted := runs(sched), adapters.NewPersisted(sched.DB())
	ctx := context.Background()
	due := time.Now().UTC().Add(-time.Second).Truncate(time.Microsecond)
	// A foreign target before and after the run's, so the range matters.
	other := spec("other", 1, 1, due)
	if _, err := rt.Create(ctx, other, keep(due)); err != nil {
		t.Fatal(err)
	}
	created, err := rt.Create(ctx, spec("run-c", 500, 50, due), keep(due))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Create(ctx, other, keep(due)); err != nil {
		t.Fatal(err)
	}
	rng := created.Range

	// Before any claim, without the sink's table: zeros, no error.
	c, err := rt.SampleOutbox(ctx, rng)
	if err != nil || c.Rows != 0 || c.Published != 0 {
		t.Fatalf("counts = %+v, %v", c, err)
	}
	if n, err := persisted.Count(ctx, rng); err != nil || n != 0 {
		t.Fatalf("persisted without the sink's table = %d, %v", n, err)
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
	c, err = rt.SampleOutbox(ctx, rng)
	if err != nil || c.Rows != 500 || c.Published != 200 || !c.RelayUpdatedAt.Equal(marked) {
		t.Fatalf("counts = %+v, %v; want 500 outbox rows, 200 published, cursor moved at %s", c, err, marked)
	}
	// The same range marked non-exclusive gives the same counts (run_id
	// is checked); an exclusive range one wider would count the foreign
	// ones (one on each side: a bulk create's ids are consecutive).
	c2, err := rt.SampleOutbox(ctx, domain.TargetRange{RunID: "run-c", MinID: rng.MinID - 1, MaxID: rng.MaxID + 1})
	if err != nil || c2.Rows != 500 {
		t.Fatalf("non-exclusive counts = %+v, %v", c2, err)
	}
	c3, err := rt.SampleOutbox(ctx, domain.TargetRange{RunID: "run-c", MinID: rng.MinID - 1, MaxID: rng.MaxID + 1, Exclusive: true})
	if err != nil || c3.Rows != 502 {
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
	if n, err := persisted.Count(ctx, rng); err != nil || n != 3 {
		t.Fatalf("persisted = %d, %v; want 3", n, err)
	}
	wider := domain.TargetRange{RunID: "run-c", MinID: rng.MinID - 1, MaxID: rng.MaxID + 1}
	if n, err := persisted.Count(ctx, wider); err != nil || n != 3 {
		t.Fatalf("persisted in a non-exclusive range = %d, %v; want 3", n, err)
	}
	outbox, last, err := rt.OutboxReport(ctx, rng)
	if err != nil || outbox != 500 || last.IsZero() {
		t.Fatalf("report data: outbox %d last %s, %v", outbox, last, err)
	}
	got, err := persisted.Rows(ctx, rng)
	if err != nil || len(got) != 3 {
		t.Fatalf("report data: rows %d, %v", len(got), err)
	}
	rep := domain.ComputeReport(domain.ReportInput{DueAt: due, Eligible: 500, OutboxCreated: outbox, LastOutboxAt: last, Rows: got})
	if rep.Lost != 497 || rep.DuplicatesPersisted != 0 || rep.Duplicates != 0 || rep.TotalSec != 4 || rep.LatencyMs.P50 != 3000 {
		t.Fatalf("report = lost %d dupPersisted %d dup %d total %v p50 %v", rep.Lost, rep.DuplicatesPersisted, rep.Duplicates, rep.TotalSec, rep.LatencyMs.P50)
	}

	// Deleting the run's rows leaves the other run's and the outbox row at
	// the relay cursor.
	if err := rt.Delete(ctx, rng); err != nil {
		t.Fatal(err)
	}
	if err := persisted.Delete(ctx, rng); err != nil {
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

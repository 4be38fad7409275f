package adapters

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

func openStore(tb testing.TB) *MySQLStore {
	tb.Helper()
	ctx := context.Background()
	s, err := OpenMySQL(ctx, testkit.MySQLDSN(tb), 8)
	if err != nil {
		tb.Fatalf("open store: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return s
}

func oneShot(tb testing.TB, rcpt string, due time.Time) domain.Target {
	tb.Helper()
	t, err := domain.NewTarget(rcpt, domain.ChannelSim, "", "tmpl", []byte(`{"n":1}`), domain.OneShot(due), due, domain.Limits{MaxParamsBytes: 1024})
	if err != nil {
		tb.Fatal(err)
	}
	t.CreatedAt, t.UpdatedAt = due, due
	return t
}

func cronTarget(tb testing.TB, rcpt, expr, zone string, now time.Time) domain.Target {
	tb.Helper()
	s, err := domain.ParseCron(expr, zone)
	if err != nil {
		tb.Fatal(err)
	}
	t, err := domain.NewTarget(rcpt, domain.ChannelInbox, "", "tmpl", nil, s, now, domain.Limits{})
	if err != nil {
		tb.Fatal(err)
	}
	t.CreatedAt, t.UpdatedAt = now, now
	return t
}

func TestCreateGetList(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	in := []domain.Target{oneShot(t, "a", now), cronTarget(t, "b", "0 9 * * *", "Europe/Berlin", now), oneShot(t, "c", now)}
	in[2].RunID = "run-1"
	ids, err := s.CreateTargets(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 3 || ids[1] != ids[0]+1 || ids[2] != ids[1]+1 {
		t.Fatalf("ids = %v", ids)
	}
	got, err := s.GetTarget(ctx, ids[1])
	if err != nil {
		t.Fatal(err)
	}
	if got.RecipientID != "b" || got.Schedule.Expr() != "0 9 * * *" || got.Schedule.Zone() != "Europe/Berlin" ||
		!got.NextRunAt.Equal(in[1].NextRunAt) || got.Status != domain.StatusActive || !got.CreatedAt.Equal(now) {
		t.Fatalf("got %+v", got)
	}
	got0, _ := s.GetTarget(ctx, ids[0])
	if !got0.Schedule.DueAt().Equal(now) || string(got0.Params) != `{"n":1}` {
		t.Fatalf("one-shot round trip: %+v", got0)
	}
	if n, err := s.CountTargets(ctx, "run-1"); err != nil || n != 1 {
		t.Fatalf("count run-1 = %d, %v", n, err)
	}
	page, err := s.ListTargets(ctx, ids[0], 10)
	if err != nil || len(page) != 2 || page[0].ID != ids[1] {
		t.Fatalf("list after first = %v, %v", page, err)
	}
	if _, err := s.UpdateTarget(ctx, ids[2], func(t domain.Target) (domain.Target, error) { return t.Delete(now) }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetTarget(ctx, ids[2]); err == nil {
		t.Fatal("deleted target is still visible")
	}
}

// TestUpdateTargetKeepsTheQueueInStep: pausing removes a target's queue
// entry, resuming queues it at its new next run, and the claim then takes
// it there.
func TestUpdateTargetKeepsTheQueueInStep(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ids, err := s.CreateTargets(ctx, []domain.Target{oneShot(t, "r", now.Add(-time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	set := func(status domain.Status, next time.Time) {
		t.Helper()
		if _, err := s.UpdateTarget(ctx, ids[0], func(cur domain.Target) (domain.Target, error) {
			cur.Status, cur.NextRunAt, cur.UpdatedAt = status, next, now
			return cur, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	entries := func() (int, time.Time) {
		t.Helper()
		var n int
		var at sql.NullTime
		if err := s.DB().QueryRowContext(ctx, `SELECT COUNT(*), MAX(next_run_at) FROM target_due WHERE target_id = ?`, ids[0]).Scan(&n, &at); err != nil {
			t.Fatal(err)
		}
		return n, at.Time
	}
	set(domain.StatusPaused, now.Add(-time.Hour))
	if n, _ := entries(); n != 0 {
		t.Fatalf("paused target has %d queue entries, want 0", n)
	}
	if res, err := s.ClaimDue(ctx, now, 10, domain.Planner{}); err != nil || res.Targets != 0 {
		t.Fatalf("claim of a paused target: %+v, %v", res, err)
	}
	set(domain.StatusActive, now.Add(-time.Minute))
	if n, at := entries(); n != 1 || !at.Equal(now.Add(-time.Minute)) {
		t.Fatalf("resumed target: %d entries at %v, want 1 at %v", n, at, now.Add(-time.Minute))
	}
	if res, err := s.ClaimDue(ctx, now, 10, domain.Planner{}); err != nil || res.Inserted != 1 {
		t.Fatalf("claim of the resumed target: %+v, %v", res, err)
	}
	if n, _ := entries(); n != 0 {
		t.Fatalf("claimed one-shot keeps %d queue entries, want 0", n)
	}
}

// dueQueue returns the due queue's entries by target id.
func dueQueue(t *testing.T, s *MySQLStore) map[int64]time.Time {
	t.Helper()
	rows, err := s.DB().QueryContext(context.Background(), `SELECT target_id, next_run_at FROM target_due`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]time.Time{}
	for rows.Next() {
		var id int64
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			t.Fatal(err)
		}
		out[id] = at
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// mustExec runs stmts in order on db and fails tb at the first error.
func mustExec(tb testing.TB, db *sql.DB, stmts ...string) {
	tb.Helper()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			tb.Fatalf("%.60s: %v", q, err)
		}
	}
}

package adapters

import (
	"context"
	"database/sql"
	"fmt"
	"math"
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

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("migrate again: %v", err)
		}
	}
	v, err := s.SchemaVersion(ctx)
	if err != nil || v != len(migrations) {
		t.Fatalf("schema version = %d, %v; want %d", v, err, len(migrations))
	}
	var n int
	if err := s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(migrations) {
		t.Fatalf("schema_migrations rows = %d, %v", n, err)
	}
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

func TestClaimOneShotsAndRelayQueries(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var in []domain.Target
	for i := 0; i < 25; i++ {
		in = append(in, oneShot(t, fmt.Sprintf("r%d", i%5), now.Add(time.Duration(i-20)*time.Second)))
	}
	if _, err := s.CreateTargets(ctx, in); err != nil {
		t.Fatal(err)
	}
	planner := domain.Planner{Policy: domain.MissedPolicy{Collapse: true}}
	total := 0
	for {
		res, err := s.ClaimDue(ctx, now, 7, planner)
		if err != nil {
			t.Fatal(err)
		}
		if res.Inserted != res.Targets {
			t.Fatalf("claim: %+v", res)
		}
		total += res.Targets
		if res.Targets < 7 {
			break
		}
	}
	if total != 21 { // due at or before now: offsets -20..0
		t.Fatalf("claimed %d, want 21", total)
	}
	backlog, err := s.Backlog(ctx)
	if err != nil || backlog != 21 {
		t.Fatalf("backlog = %d, %v", backlog, err)
	}
	end, err := s.CommittedUpTo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Unpublished(ctx, 0, end, 10)
	if err != nil || len(first) != 10 {
		t.Fatalf("unpublished = %d, %v", len(first), err)
	}
	for i := 1; i < len(first); i++ {
		if first[i].Sequence <= first[i-1].Sequence || !first[i].DueAt.After(first[i-1].DueAt) {
			t.Fatalf("not in outbox order: %+v", first)
		}
	}
	if first[0].Channel != domain.ChannelSim || string(first[0].Params) != `{"n":1}` || first[0].TemplateID != "tmpl" {
		t.Fatalf("row: %+v", first[0])
	}
	if bounded, err := s.Unpublished(ctx, 0, first[4].Sequence, 10); err != nil || len(bounded) != 5 {
		t.Fatalf("unpublished up to %d = %d rows, %v; want 5", first[4].Sequence, len(bounded), err)
	}
	rest, err := s.Unpublished(ctx, first[len(first)-1].Sequence, end, 100)
	if err != nil || len(rest) != 11 {
		t.Fatalf("unpublished after cursor = %d, %v", len(rest), err)
	}
	if err := s.MarkPublished(ctx, first[len(first)-1].Sequence, now); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkPublished(ctx, first[0].Sequence, now); err != nil { // a late former holder
		t.Fatal(err)
	}
	if upTo, err := s.PublishedUpTo(ctx); err != nil || upTo != first[len(first)-1].Sequence {
		t.Fatalf("cursor = %d, %v; want %d (it never moves back)", upTo, err, first[len(first)-1].Sequence)
	}
	if backlog, _ := s.Backlog(ctx); backlog != 11 {
		t.Fatalf("backlog after mark = %d", backlog)
	}
	// Rows are created at now: a cut-off before now deletes nothing.
	if n, err := s.PurgePublished(ctx, now, 100); err != nil || n != 0 {
		t.Fatalf("purged %d, %v; want 0", n, err)
	}
	// Nor is a row purged before its one-shot is settled.
	if n, err := s.PurgePublished(ctx, now.Add(time.Second), 100); err != nil || n != 0 {
		t.Fatalf("purged %d before settling, %v; want 0", n, err)
	}
	if n, more, err := s.SettleOneShots(ctx, 15); err != nil || n != 15 || !more {
		t.Fatalf("settled %d (more %v), %v; want 15 and more", n, more, err)
	}
	if n, more, err := s.SettleOneShots(ctx, 15); err != nil || n != 6 || more {
		t.Fatalf("settled %d (more %v), %v; want the last 6", n, more, err)
	}
	if n, more, err := s.SettleOneShots(ctx, 15); err != nil || n != 0 || more {
		t.Fatalf("settled again %d (more %v), %v; want nothing", n, more, err)
	}
	// The row at the cursor stays.
	if n, err := s.PurgePublished(ctx, now.Add(time.Second), 100); err != nil || n != 9 {
		t.Fatalf("purged %d, %v; want 9", n, err)
	}
	if n, err := s.PurgePublished(ctx, now.Add(time.Second), 100); err != nil || n != 0 {
		t.Fatalf("purged again %d, %v; want 0", n, err)
	}
	var done int
	_ = s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM notification_targets WHERE status = 'done'`).Scan(&done)
	if done != 21 {
		t.Fatalf("done targets = %d", done)
	}
}

// TestDuplicateOccurrenceIsImpossible simulates a second scanner that
// claims the same occurrence (e.g. a paused lock holder acting on an old
// snapshot): the unique key keeps one outbox row.
// Both claim paths: the entry alone (one_shot = 1) and through the target
// (one_shot = 0).
func TestDuplicateOccurrenceIsImpossible(t *testing.T) {
	t.Parallel()
	for _, oneShotEntry := range []bool{true, false} {
		t.Run(fmt.Sprintf("one_shot=%v", oneShotEntry), func(t *testing.T) {
			t.Parallel()
			duplicateOccurrence(t, oneShotEntry)
		})
	}
}

func duplicateOccurrence(t *testing.T, oneShotEntry bool) {
	s := openStore(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ids, err := s.CreateTargets(ctx, []domain.Target{oneShot(t, "r", now)})
	if err != nil {
		t.Fatal(err)
	}
	planner := domain.Planner{}
	if res, err := s.ClaimDue(ctx, now, 10, planner); err != nil || res.Inserted != 1 {
		t.Fatalf("first claim: %+v, %v", res, err)
	}
	// Make the target due again as a stale scanner would see it.
	if _, err := s.DB().ExecContext(ctx, `UPDATE notification_targets SET status = 'active' WHERE id = ?`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO target_due (next_run_at, target_id, one_shot) VALUES (?, ?, ?)`, now, ids[0], oneShotEntry); err != nil {
		t.Fatal(err)
	}
	// A new target in the same batch: its row is written, the duplicate's
	// is not (the plain INSERT fails on the duplicate, the merging one
	// writes the new row only).
	if _, err := s.CreateTargets(ctx, []domain.Target{oneShot(t, "r2", now)}); err != nil {
		t.Fatal(err)
	}
	res, err := s.ClaimDue(ctx, now, 10, planner)
	if err != nil || res.Targets != 2 || res.Inserted != 1 {
		t.Fatalf("second claim: %+v, %v; want 2 targets, 1 row", res, err)
	}
	var n, first int
	_ = s.DB().QueryRowContext(ctx, `SELECT COUNT(*), SUM(target_id = ?) FROM outbox`, ids[0]).Scan(&n, &first)
	if n != 2 || first != 1 {
		t.Fatalf("outbox rows = %d (%d of the first target), want 2 (1)", n, first)
	}
}

// TestClaimManyDistinctNextRuns exercises the CASE update path: cron
// targets in many zones advance to different next runs in one batch.
func TestClaimManyDistinctNextRuns(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	created := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	zones := []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Asia/Kolkata", "Australia/Sydney",
		"America/Los_Angeles", "Europe/London", "America/Sao_Paulo", "Africa/Cairo", "Pacific/Auckland", "Asia/Kathmandu"}
	var in []domain.Target
	for i, z := range zones {
		in = append(in, cronTarget(t, fmt.Sprintf("r%d", i), "0 9 * * *", z, created))
	}
	ids, err := s.CreateTargets(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	now := created.Add(36 * time.Hour)
	res, err := s.ClaimDue(ctx, now, 100, domain.Planner{Policy: domain.MissedPolicy{Collapse: true}})
	if err != nil || res.Targets != len(zones) || res.Inserted != len(zones) {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	for i, id := range ids {
		got, err := s.GetTarget(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := in[i].Schedule.Next(now)
		if !got.NextRunAt.Equal(want) || got.Status != domain.StatusActive {
			t.Errorf("%s: next %s status %s, want %s active", zones[i], got.NextRunAt, got.Status, want)
		}
	}
}

// TestMigrateDropsCopiedOutboxColumns upgrades a database whose outbox
// still has the columns version 1 used to copy from the target.
func TestMigrateDropsCopiedOutboxColumns(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	mustExec(t, s.DB(),
		`ALTER TABLE outbox ADD COLUMN event_id CHAR(36) NULL, ADD COLUMN params MEDIUMTEXT NULL`,
		`DELETE FROM schema_migrations WHERE version = 3`)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox'`).Scan(&n); err != nil || n != 5 {
		t.Fatalf("outbox has %d columns (%v), want 5", n, err)
	}
}

// TestOverlappingClaims begins a second claim while the first is open (as
// a scan does): they take disjoint targets in (next_run_at, id) order, and
// finishing them in order gives the first claim's targets the lower outbox
// ids.
func TestOverlappingClaims(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var in []domain.Target
	for i := 0; i < 10; i++ {
		in = append(in, oneShot(t, "r", now.Add(-time.Duration(i)*time.Second)))
	}
	if _, err := s.CreateTargets(ctx, in); err != nil {
		t.Fatal(err)
	}
	first, err := s.BeginClaim(ctx, now, 4, domain.Planner{}, domain.ClaimCursor{})
	if err != nil || first == nil || first.Targets() != 4 {
		t.Fatalf("first claim: %v, %v", first, err)
	}
	second, err := s.BeginClaim(ctx, now, 4, domain.Planner{}, first.Cursor())
	if err != nil || second == nil || second.Targets() != 4 {
		t.Fatalf("second claim: %v, %v", second, err)
	}
	if !second.Cursor().NextRunAt.After(first.Cursor().NextRunAt) {
		t.Fatalf("cursors %+v then %+v are not in order", first.Cursor(), second.Cursor())
	}
	for _, c := range []interface {
		Finish(context.Context) (domain.ClaimResult, error)
	}{first, second} {
		if res, err := c.Finish(ctx); err != nil || res.Inserted != 4 {
			t.Fatalf("finish: %+v, %v", res, err)
		}
	}
	notes, err := s.Unpublished(ctx, 0, math.MaxUint64, 100)
	if err != nil || len(notes) != 8 {
		t.Fatalf("outbox: %d rows, %v", len(notes), err)
	}
	for i := 1; i < len(notes); i++ {
		if notes[i].OccurrenceAt.Before(notes[i-1].OccurrenceAt) {
			t.Fatalf("outbox order does not follow due order at %d: %v then %v", i, notes[i-1].OccurrenceAt, notes[i].OccurrenceAt)
		}
	}
	// The two left over are claimed from the start.
	if res, err := s.ClaimDue(ctx, now, 10, domain.Planner{}); err != nil || res.Targets != 2 {
		t.Fatalf("rest: %+v, %v", res, err)
	}
}

// TestMigrateFillsTheDueQueue takes a database back to version 3 (due
// index, no queue) with active, paused and done targets: version 4 queues
// exactly the active ones at their next run and drops the due index.
func TestMigrateFillsTheDueQueue(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ids, err := s.CreateTargets(ctx, []domain.Target{oneShot(t, "a", now), oneShot(t, "b", now.Add(time.Hour)), oneShot(t, "c", now)})
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, s.DB(),
		`DROP TABLE target_due`,
		`ALTER TABLE outbox_relay DROP COLUMN settled_id`,
		`ALTER TABLE notification_targets ADD KEY idx_targets_due (status, next_run_at, id)`,
		`DELETE FROM schema_migrations WHERE version >= 4`,
		fmt.Sprintf(`UPDATE notification_targets SET status = 'paused' WHERE id = %d`, ids[2]))
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	queued := dueQueue(t, s)
	if len(queued) != 2 || !queued[ids[0]].Equal(now) || !queued[ids[1]].Equal(now.Add(time.Hour)) {
		t.Fatalf("queue = %v, want targets %d at %v and %d an hour later", queued, ids[0], now, ids[1])
	}
	var n int
	if err := s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'notification_targets' AND INDEX_NAME = 'idx_targets_due'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("idx_targets_due still there (%d, %v)", n, err)
	}
}

// TestMigrateMarksOneShotEntries takes a database back to version 4 (queue
// entries without kind or run, no settle cursor) with a one-shot of a run,
// a cron target and an outbox row: version 5 marks the one-shot's entry,
// copies its run, and starts the settle cursor after the existing outbox.
func TestMigrateMarksOneShotEntries(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	once := oneShot(t, "a", now)
	once.RunID = "run-m"
	ids, err := s.CreateTargets(ctx, []domain.Target{once, cronTarget(t, "b", "@hourly", "UTC", now)})
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, s.DB(),
		`ALTER TABLE target_due DROP COLUMN one_shot, DROP COLUMN run_id`,
		`ALTER TABLE outbox_relay DROP COLUMN settled_id`,
		fmt.Sprintf(`INSERT INTO outbox (target_id, occurrence_at, created_at) VALUES (%d, '2026-03-01 11:00:00', '2026-03-01 11:00:00')`, ids[1]),
		`DELETE FROM schema_migrations WHERE version = 5`)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := s.DB().QueryContext(ctx, `SELECT target_id, one_shot, COALESCE(run_id, '') FROM target_due ORDER BY target_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id int64
		var oneShot bool
		var run string
		if err := rows.Scan(&id, &oneShot, &run); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%v:%s", id, oneShot, run))
	}
	if want := fmt.Sprintf("[%d:true:run-m %d:false:]", ids[0], ids[1]); fmt.Sprint(got) != want {
		t.Fatalf("queue = %v, want %s", got, want)
	}
	var settled, last uint64
	if err := s.DB().QueryRowContext(ctx, `SELECT settled_id, (SELECT MAX(id) FROM outbox) FROM outbox_relay`).Scan(&settled, &last); err != nil || settled != last || last == 0 {
		t.Fatalf("settle cursor %d, last outbox row %d (%v); want equal", settled, last, err)
	}
	if err := s.Migrate(ctx); err != nil { // and again: a no-op
		t.Fatal(err)
	}
}

// TestClaimDropsStaleQueueEntries: on the path that reads the target
// (entries with one_shot = 0, as cron targets and replicas older than
// schema 5 write them), queue entries that no longer match their target
// are dropped without an outbox row (target deleted, paused, or due later,
// which gets its right entry), and the entry of a target another
// transaction holds stays for a later claim.
func TestClaimDropsStaleQueueEntries(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var in []domain.Target
	for _, r := range []string{"due", "gone", "paused", "later", "held"} {
		in = append(in, oneShot(t, r, now.Add(-time.Minute)))
	}
	ids, err := s.CreateTargets(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Hour)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`UPDATE target_due SET one_shot = 0`, nil},
		{`DELETE FROM notification_targets WHERE id = ?`, []any{ids[1]}},
		{`UPDATE notification_targets SET status = 'paused' WHERE id = ?`, []any{ids[2]}},
		{`UPDATE notification_targets SET next_run_at = ? WHERE id = ?`, []any{later, ids[3]}},
	} {
		if _, err := s.DB().ExecContext(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	// Another transaction (an API request) holds the last target.
	held, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Rollback() }()
	var one int64
	if err := held.QueryRowContext(ctx, `SELECT id FROM notification_targets WHERE id = ? FOR UPDATE`, ids[4]).Scan(&one); err != nil {
		t.Fatal(err)
	}
	res, err := s.ClaimDue(ctx, now, 10, domain.Planner{})
	if err != nil || res.Targets != 1 || res.Inserted != 1 {
		t.Fatalf("claim: %+v, %v; want the one due target", res, err)
	}
	var target int64
	if err := s.DB().QueryRowContext(ctx, `SELECT target_id FROM outbox`).Scan(&target); err != nil || target != ids[0] {
		t.Fatalf("outbox row of target %d (%v), want %d", target, err, ids[0])
	}
	queue := dueQueue(t, s)
	if len(queue) != 2 || !queue[ids[3]].Equal(later) || !queue[ids[4]].Equal(now.Add(-time.Minute)) {
		t.Fatalf("queue after the claim = %v, want %d at %v and %d kept", queue, ids[3], later, ids[4])
	}
	// Released, the held target is claimed next time.
	_ = held.Rollback()
	if res, err := s.ClaimDue(ctx, now, 10, domain.Planner{}); err != nil || res.Inserted != 1 {
		t.Fatalf("claim after release: %+v, %v", res, err)
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

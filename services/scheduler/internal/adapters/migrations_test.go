package adapters

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

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

// TestMigrateDropsCopiedOutboxColumns upgrades a database whose outbox
// has the columns migration 1 creates with copies of the target.
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

// TestMigrateOrdersNewIDsOnly takes a database back to version 10 (the
// claim lock's old table, no cutoff) with an outbox row: version 11
// renames the lock's table, so that an older scheduler's claim or relay
// fails, and starts ordered ids after that row, which keeps the hashed id
// it may have been published with; a row claimed after gets an ordered one.
func TestMigrateOrdersNewIDsOnly(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ids, err := s.CreateTargets(ctx, []domain.Target{oneShot(t, "a", now), oneShot(t, "b", now)})
	if err != nil {
		t.Fatal(err)
	}
	insertRow := func(target int64) string {
		return fmt.Sprintf(`INSERT INTO outbox (target_id, occurrence_at, created_at) VALUES (%d, '2026-03-01 12:00:00', '2026-03-01 12:00:00')`, target)
	}
	mustExec(t, s.DB(),
		`RENAME TABLE outbox_lock TO outbox_claim_lock`,
		`ALTER TABLE outbox_relay DROP COLUMN ordered_ids_after`,
		`DELETE FROM schema_migrations WHERE version = 11`,
		insertRow(ids[0]))
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// What a scheduler built before version 11 runs to claim or relay.
	var one int
	if err := s.DB().QueryRowContext(ctx, `SELECT id FROM outbox_claim_lock WHERE id = 1`).Scan(&one); err == nil {
		t.Fatal("outbox_claim_lock still answers: an older scheduler could still claim and relay")
	}
	mustExec(t, s.DB(), insertRow(ids[1]))
	if err := s.Migrate(ctx); err != nil { // and again: a no-op, the cutoff stays
		t.Fatal(err)
	}
	upTo, err := s.CommittedUpTo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := s.Unpublished(ctx, 0, upTo, 10)
	if err != nil || len(ns) != 2 {
		t.Fatalf("unpublished = %d rows, %v; want 2", len(ns), err)
	}
	for i, mk := range []func(int64, time.Time, time.Time) string{domain.HashedNotificationID, domain.NotificationID} {
		var created time.Time
		if err := s.DB().QueryRowContext(ctx, `SELECT created_at FROM notification_targets WHERE id = ?`, ids[i]).Scan(&created); err != nil {
			t.Fatal(err)
		}
		n := ns[i]
		if want := mk(ids[i], created, n.OccurrenceAt); n.TargetID != ids[i] || n.ID != want {
			t.Errorf("row %d: target %d id %s, want target %d id %s", i, n.TargetID, n.ID, ids[i], want)
		}
	}
}

// TestMigrateWaitsForAClaimInFlight runs version 11 while a claim of a
// scheduler built for version 10 holds the old lock and has written its
// outbox row: the rename waits for that claim, so the cutoff covers its
// row, which keeps its hashed id. Without a cutoff (a migration stopped
// before setting it), every row keeps its hashed id.
func TestMigrateWaitsForAClaimInFlight(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ids, err := s.CreateTargets(ctx, []domain.Target{oneShot(t, "a", now)})
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, s.DB(),
		`RENAME TABLE outbox_lock TO outbox_claim_lock`,
		`ALTER TABLE outbox_relay DROP COLUMN ordered_ids_after`,
		`DELETE FROM schema_migrations WHERE version = 11`)
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	var one int
	if err := tx.QueryRowContext(ctx, `SELECT id FROM outbox_claim_lock WHERE id = 1 FOR UPDATE`).Scan(&one); err != nil {
		t.Fatal(err)
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO outbox (target_id, occurrence_at, created_at) VALUES (?, ?, ?)`, ids[0], now, now)
	if err != nil {
		t.Fatal(err)
	}
	rowID, _ := res.LastInsertId()
	done := make(chan error, 1)
	go func() { done <- s.Migrate(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE INFO LIKE 'RENAME TABLE outbox_claim_lock%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the migration ended (%v) while a claim held the old lock", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the migration never reached its rename")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the migration did not finish after the claim committed")
	}
	var cutoff int64
	if err := s.DB().QueryRowContext(ctx, `SELECT ordered_ids_after FROM outbox_relay WHERE id = 1`).Scan(&cutoff); err != nil || cutoff != rowID {
		t.Fatalf("cutoff %d (%v), want the in-flight claim's row %d", cutoff, err, rowID)
	}
	var created time.Time
	if err := s.DB().QueryRowContext(ctx, `SELECT created_at FROM notification_targets WHERE id = ?`, ids[0]).Scan(&created); err != nil {
		t.Fatal(err)
	}
	hashed := domain.HashedNotificationID(ids[0], created, now)
	check := func(when string) {
		t.Helper()
		upTo, err := s.CommittedUpTo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ns, err := s.Unpublished(ctx, 0, upTo, 10)
		if err != nil || len(ns) != 1 || ns[0].ID != hashed {
			t.Fatalf("%s: unpublished %+v (%v), want one row with the hashed id %s", when, ns, err, hashed)
		}
	}
	check("after the migration")
	mustExec(t, s.DB(), `UPDATE outbox_relay SET ordered_ids_after = NULL WHERE id = 1`)
	check("without a cutoff")
}

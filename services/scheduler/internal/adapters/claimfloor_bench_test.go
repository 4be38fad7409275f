package adapters

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// BenchmarkClaimFloor compares, in one run on one database, the store's
// claim of 100,000 due one-shots (5,000 per transaction, one connection)
// with the bare SQL a claim cannot do without, on two table layouts:
//
//   - store: MySQLStore.BeginClaim + Finish with the cursor, as a scan does
//     on one connection (the scheduler overlaps two). It fires one-shots
//     from their queue entries alone, less work than either bare-SQL run
//     below (no target read or update). It also reports the database
//     server's CPU per target when the server runs on this machine.
//   - due-index: due targets found through an index of the targets,
//     statements alone, no Go planning: locking read of a (status,
//     next_run_at, id) index of the targets with a cursor, one UPDATE to
//     done (which moves each target's entry in that index), outbox
//     INSERTs, commit.
//   - queue-table: due targets found through a due-queue table,
//     statements alone: locking read
//     of the due queue (clustered key (next_run_at, target_id)), locking
//     read of the targets by id, DELETE of the queue's key range, UPDATE to
//     done (no index entry moves), outbox INSERTs, commit.
//
// It reports targets/s; the ratios between the sub-benchmarks are what to
// quote (the machine is shared). Run:
//
//	go test -run '^$' -bench ClaimFloor -benchtime 3x ./internal/adapters/
func BenchmarkClaimFloor(b *testing.B) {
	const n, batch = 100_000, 5_000
	ctx := context.Background()
	s := openStore(b)
	db := s.DB()
	due := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	srv := testkit.LocalMySQLServer(ctx, db)
	b.Run("store", func(b *testing.B) {
		var spent, server time.Duration
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			mustExec(b, db, `TRUNCATE TABLE outbox`, `TRUNCATE TABLE notification_targets`, `TRUNCATE TABLE target_due`)
			targets := make([]domain.Target, n)
			for j := range targets {
				targets[j] = oneShot(b, fmt.Sprintf("r%d", j%10_000), due.Add(time.Duration(j%1000)*time.Microsecond))
			}
			if _, err := s.CreateTargets(ctx, targets); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			t0, cpu0 := time.Now(), srv.CPU()
			now, cur, got := time.Now().UTC(), domain.ClaimCursor{}, 0
			for {
				c, err := s.BeginClaim(ctx, now, batch, domain.Planner{}, cur)
				if err != nil {
					b.Fatal(err)
				}
				if c == nil {
					break
				}
				cur = c.Cursor()
				res, err := c.Finish(ctx)
				if err != nil {
					b.Fatal(err)
				}
				got += res.Inserted
			}
			spent += time.Since(t0)
			server += srv.CPU() - cpu0
			if got != n {
				b.Fatalf("claimed %d, want %d", got, n)
			}
		}
		b.ReportMetric(float64(n*b.N)/spent.Seconds(), "targets/s")
		if srv.Local() { // the server runs here: its CPU per target
			b.ReportMetric(float64(server.Microseconds())/float64(n*b.N), "server-CPU-us/target")
		}
		b.ReportMetric(0, "ns/op")
	})
	b.Run("due-index", func(b *testing.B) {
		floorRun(b, db, n, batch, due, false)
	})
	b.Run("queue-table", func(b *testing.B) {
		floorRun(b, db, n, batch, due, true)
	})
}

// floorRun seeds n due one-shots into scratch tables shaped like the
// targets and outbox (plus the queue when queue is set) and times claiming
// them with bare statements.
func floorRun(b *testing.B, db *sql.DB, n, batch int, due time.Time, queue bool) {
	ctx := context.Background()
	var spent time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		mustExec(b, db, `DROP TABLE IF EXISTS floor_t, floor_q, floor_o`,
			`CREATE TABLE floor_t LIKE notification_targets`,
			`CREATE TABLE floor_o LIKE outbox`,
			`SET STATEMENT max_recursive_iterations = 1000000 FOR INSERT INTO floor_t (recipient_id, channel, template_id, params, schedule_kind, due_at, next_run_at, status, created_at, updated_at)
				WITH RECURSIVE g(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM g WHERE k + 1 < `+fmt.Sprint(n)+`)
				SELECT CONCAT('r', k MOD 10000), 'sim', 'tmpl', '{"n":1}', 'once', '`+due.Format(time.DateTime)+`',
					'`+due.Format(time.DateTime)+`' + INTERVAL (k MOD 1000) MICROSECOND, 'active', NOW(6), NOW(6) FROM g`)
		if !queue {
			mustExec(b, db, `ALTER TABLE floor_t ADD KEY idx_targets_due (status, next_run_at, id)`)
		} else {
			mustExec(b, db, `CREATE TABLE floor_q (next_run_at DATETIME(6) NOT NULL, target_id BIGINT UNSIGNED NOT NULL,
					PRIMARY KEY (next_run_at, target_id)) ENGINE=InnoDB`,
				`INSERT INTO floor_q SELECT next_run_at, id FROM floor_t`)
		}
		b.StartTimer()
		t0 := time.Now()
		now, got := time.Now().UTC(), 0
		var lastAt time.Time
		var lastID int64
		for first := true; ; first = false {
			ids, ats := floorClaim(ctx, b, db, now, batch, queue, first, lastAt, lastID)
			if len(ids) == 0 {
				break
			}
			lastAt, lastID = ats[len(ats)-1], ids[len(ids)-1]
			got += len(ids)
		}
		spent += time.Since(t0)
		if got != n {
			b.Fatalf("claimed %d, want %d", got, n)
		}
	}
	b.ReportMetric(float64(n*b.N)/spent.Seconds(), "targets/s")
	b.ReportMetric(0, "ns/op")
}

// floorClaim runs one claim transaction of the floor benchmark and returns
// the ids and next run times it claimed.
func floorClaim(ctx context.Context, b *testing.B, db *sql.DB, now time.Time, batch int, queue, first bool, lastAt time.Time, lastID int64) ([]int64, []time.Time) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	after, args := ``, []any{now}
	if !first {
		after, args = ` AND (next_run_at > ? OR (next_run_at = ? AND %s > ?))`, append(args, lastAt, lastAt, lastID)
	}
	var q string
	if queue {
		q = `SELECT target_id, next_run_at FROM floor_q WHERE next_run_at <= ?` + strings.Replace(after, "%s", "target_id", 1) +
			` ORDER BY next_run_at, target_id LIMIT ? FOR UPDATE SKIP LOCKED`
	} else {
		q = `SELECT id, next_run_at, schedule_kind, due_at, cron_expr, time_zone, status, run_id FROM floor_t
			WHERE status = 'active' AND next_run_at <= ?` + strings.Replace(after, "%s", "id", 1) +
			` ORDER BY next_run_at, id LIMIT ? FOR UPDATE SKIP LOCKED`
	}
	ids, ats := floorScan(ctx, b, tx, q, append(args, batch)...)
	if len(ids) == 0 {
		return nil, nil
	}
	idArgs := make([]any, len(ids))
	for i, id := range ids {
		idArgs[i] = id
	}
	var in strings.Builder
	inList(&in, len(ids))
	if queue {
		floorScan(ctx, b, tx, `SELECT id, next_run_at, schedule_kind, due_at, cron_expr, time_zone, status, run_id FROM floor_t WHERE id IN `+in.String()+` FOR UPDATE SKIP LOCKED`, idArgs...)
		from := ``
		fromArgs := []any{}
		if !first {
			from, fromArgs = `(next_run_at > ? OR (next_run_at = ? AND target_id > ?)) AND `, []any{lastAt, lastAt, lastID}
		}
		end := ats[len(ats)-1]
		if _, err := tx.ExecContext(ctx, `DELETE FROM floor_q WHERE `+from+`(next_run_at < ? OR (next_run_at = ? AND target_id <= ?))`,
			append(fromArgs, end, end, ids[len(ids)-1])...); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE floor_t SET status = 'done', updated_at = ? WHERE id IN `+in.String(), append([]any{now}, idArgs...)...); err != nil {
		b.Fatal(err)
	}
	for start := 0; start < len(ids); start += insertChunk {
		end := min(start+insertChunk, len(ids))
		var ib strings.Builder
		ib.WriteString(`INSERT INTO floor_o (target_id, occurrence_at, run_id, created_at) VALUES `)
		placeholders(&ib, end-start, outboxColumns)
		ib.WriteString(` ON DUPLICATE KEY UPDATE id = id`)
		vals := make([]any, 0, (end-start)*outboxColumns)
		for j := start; j < end; j++ {
			vals = append(vals, ids[j], ats[j], nil, now)
		}
		if _, err := tx.ExecContext(ctx, ib.String(), vals...); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	return ids, ats
}

// floorScan runs q and returns its first two columns (id, next_run_at),
// reading every column as the claim does.
func floorScan(ctx context.Context, b *testing.B, tx *sql.Tx, q string, args ...any) ([]int64, []time.Time) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		b.Fatal(err)
	}
	var ids []int64
	var ats []time.Time
	for rows.Next() {
		var id int64
		var at time.Time
		dst := []any{&id, &at}
		for range cols[2:] {
			dst = append(dst, new(sql.RawBytes))
		}
		if err := rows.Scan(dst...); err != nil {
			b.Fatal(err)
		}
		ids, ats = append(ids, id), append(ats, at)
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return ids, ats
}

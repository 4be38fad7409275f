package harness

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestNormalizeStatement(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"SELECT id FROM t WHERE id = 42 AND name = 'o''k' AND x = \"a\\\"b\"",
			"SELECT id FROM t WHERE id = ? AND name = ? AND x = ?"},
		{"DELETE FROM due WHERE next_run_at BETWEEN '2026-01-01 00:00:00' AND '2026-01-01 00:00:01'\n\t AND target_id IN (1, 2,3)",
			"DELETE FROM due WHERE next_run_at BETWEEN ? AND ? AND target_id IN (?…)"},
		{"INSERT INTO t1 (a, b2) VALUES (1, 'x'), (2, 'y'),(3,'z') ON DUPLICATE KEY UPDATE a = a",
			"INSERT INTO t1 (a, b2) VALUES (?…)… ON DUPLICATE KEY UPDATE a = a"},
		{"SELECT * FROM t WHERE x IN (7) LIMIT 5 OFFSET -1.5e3", "SELECT * FROM t WHERE x IN (?) LIMIT ? OFFSET ?"},
		{"SELECT 0x1F, idx_2", "SELECT ?, idx_2"},
	} {
		if got := NormalizeStatement(tc.in); got != tc.want {
			t.Errorf("NormalizeStatement(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

// The statement log sums, by shape, the statements that a session opened
// after it started runs in its database within the window, refuses a
// second start while it runs, and Restore puts the server's settings
// back. Not parallel: it changes the server's global log settings for its
// run (tens of milliseconds). A session another package's test opens in
// that window logs its statements too: slower for that session, never
// different results.
func TestStatementLogSumsAWindowByShape(t *testing.T) {
	ctx := context.Background()
	deps := LocalDeps()
	iso, _, db := isolatedDB(t, "stmtlog")
	admin, err := sql.Open("mysql", deps.MySQLDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	settings := func() string {
		var s string
		if err := admin.QueryRowContext(ctx, `SELECT CONCAT_WS('|', @@GLOBAL.log_output, @@GLOBAL.log_slow_filter,
			@@GLOBAL.long_query_time, @@GLOBAL.slow_query_log)`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := settings()
	log, err := StartStatementLog(ctx, admin, iso.Database)
	if err != nil {
		t.Fatal(err)
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			_ = log.Restore(context.Background())
		}
	})
	if _, err := StartStatementLog(ctx, admin, iso.Database); err == nil || !strings.Contains(err.Error(), "already logs every statement") {
		t.Fatalf("a second start while the log runs: err = %v, want a refusal", err)
	}

	// One connection: the server writes a statement's log row after it
	// has answered, so only a next statement on the same connection (the
	// barrier below) makes sure the last one's row is there.
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	exec := func(q string) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	exec(`CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20))`)
	exec(`INSERT INTO t VALUES (100, 'before the window')`)
	from := time.Now()
	for i := range 3 {
		exec(fmt.Sprintf(`INSERT INTO t VALUES (%d, 'a'), (%d, 'b')`, 2*i, 2*i+1))
	}
	for i := range 4 {
		var n int
		if err := conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT COUNT(*) FROM t WHERE id < %d`, i)).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	to := time.Now()
	exec(`DO 0`) // the barrier, after the window
	stats, err := log.Summary(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]StatementStat{}
	for _, s := range stats {
		got[s.Shape] = s
	}
	ins := got["INSERT INTO t VALUES (?…)…"]
	if ins.Calls != 3 || ins.RowsAffected != 6 {
		t.Errorf("inserts: %+v, want 3 calls affecting 6 rows (all shapes: %v)", ins, shapes(stats))
	}
	if sel := got["SELECT COUNT(*) FROM t WHERE id < ?"]; sel.Calls != 4 || sel.RowsSent != 4 {
		t.Errorf("selects: %+v, want 4 calls sending 4 rows (all shapes: %v)", sel, shapes(stats))
	}
	for shape := range got {
		if strings.HasPrefix(shape, "CREATE") || strings.HasPrefix(shape, "DO ") || shape == "INSERT INTO t VALUES (?…)" {
			t.Errorf("a statement from before the window was summed: %s", shape)
		}
	}

	if err := log.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	restored = true
	if after := settings(); after != before {
		t.Fatalf("settings after Restore %q, want %q", after, before)
	}
}

func shapes(stats []StatementStat) []string {
	var out []string
	for _, s := range stats {
		out = append(out, fmt.Sprintf("%d× %s", s.Calls, s.Shape))
	}
	return out
}

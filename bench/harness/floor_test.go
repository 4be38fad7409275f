package harness

import (
	"context"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/services/sink/notifications"
)

// TestFloorWritesEveryRowAndRecord runs a small floor on the real
// dependencies: the sink's notifications table (its own migrations, rows
// seeded through its package) and a table with a one-column key read back
// as the relay reads the outbox. Run checks, untimed, that every shadow
// row and every Redis key was written, and returns only once every record
// went through both topics.
func TestFloorWritesEveryRowAndRecord(t *testing.T) {
	deps := LocalDeps()
	ctx := context.Background()
	iso, dsn, db := isolatedDB(t, "floortest")

	const n = 3050 // a partial last batch of each table: its INSERT interpolated, the others prepared
	if err := notifications.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := notifications.SeedInbox(ctx, db, notifications.Seed{RecipientID: "r1", FirstTarget: 1, Count: n,
		Start: time.Now().UTC().Truncate(time.Microsecond), IDPrefix: "floor-"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE queue (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO queue (v) VALUES "+strings.TrimSuffix(strings.Repeat("('row'),", n), ",")); err != nil {
		t.Fatal(err)
	}

	f := &Floor{
		DSN: dsn, Brokers: []string{deps.Kafka}, Redis: deps.Redis, Name: iso.Name,
		Tables:     []FloorTable{{Source: "queue", Batch: 1000, ReadBack: 700, Key: "id"}, {Source: "notifications", Batch: 200, Writers: 3, Shuffle: true}},
		N:          n,
		Partitions: 3, Consumers: 2, RecordBytes: 200,
		CPU: map[string]int{"bench": os.Getpid()},
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	res, err := f.Run(rctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows["queue"] != n || res.Rows["notifications"] != n {
		t.Errorf("rows %v, want %d of each", res.Rows, n)
	}
	if res.Seconds <= 0 || res.PerSecond <= 0 {
		t.Errorf("floor took %vs (%v/s)", res.Seconds, res.PerSecond)
	}
	// This process did the floor's client work: its CPU is measured, over
	// the timed part only (at most every core busy for its seconds, plus a
	// clock tick each side).
	if c, most := res.CPUSec["bench"], res.Seconds*float64(runtime.NumCPU())+0.02; c <= 0 || c > most {
		t.Errorf("floor CPU seconds %v, want the test process's above 0 and at most %.2f", res.CPUSec, most)
	}
	if got, want := res.CPUMicrosPerNotification["total"], round(res.CPUSec["bench"]*1e6/n, 1); got != want || res.CPUMicrosPerNotification["bench"] != want {
		t.Errorf("floor CPU-us per notification %v, want bench and total %v", res.CPUMicrosPerNotification, want)
	}
	// The floor cleans up after itself.
	var left int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE '%floor%'").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d shadow tables left behind", left)
	}
}

// TestFloorLoadOrder checks the order the floor holds a table's rows in:
// its primary key's as read, or a permutation of them with Shuffle.
func TestFloorLoadOrder(t *testing.T) {
	ctx := context.Background()
	_, _, db := isolatedDB(t, "floororder")
	const n = 500
	if _, err := db.ExecContext(ctx, "CREATE TABLE queue (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO queue (v) VALUES "+strings.TrimSuffix(strings.Repeat("('row'),", n), ",")); err != nil {
		t.Fatal(err)
	}
	f := &Floor{N: n, Name: "floororder", db: db}
	for _, shuffle := range []bool{false, true} {
		s, err := f.load(ctx, FloorTable{Source: "queue", Shuffle: shuffle})
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int, len(s.rows))
		for i, r := range s.rows {
			if ids[i], err = strconv.Atoi(r[0].(string)); err != nil {
				t.Fatal(err)
			}
		}
		sorted := slices.IsSorted(ids)
		slices.Sort(ids)
		if len(ids) != n || ids[0] != 1 || ids[n-1] != n || len(slices.Compact(ids)) != n {
			t.Fatalf("shuffle %v: the rows are not ids 1..%d once each", shuffle, n)
		}
		// A shuffle of 500 rows comes out sorted once in 500! tries.
		if sorted == shuffle {
			t.Errorf("shuffle %v: rows in key order = %v", shuffle, sorted)
		}
	}
}

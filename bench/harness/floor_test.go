package harness

import (
	"context"
	"fmt"
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
// seeded through its package), written shuffled, and a table with a
// one-column key, written in key order and read back as the relay reads
// the outbox. Run checks, untimed, that every shadow row and every Redis
// key was written, and returns only once every record went through both
// topics.
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
		Tables: []FloorTable{{Source: "queue", Batch: 1000, ReadBack: 700, Key: "id", OrderBy: "id"},
			{Source: "notifications", Batch: 200, Writers: 3, OrderBy: "target_id, occurrence_at", Shuffle: true}},
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
// OrderBy's, or with Shuffle a permutation of the same rows far from it.
func TestFloorLoadOrder(t *testing.T) {
	ctx := context.Background()
	_, _, db := isolatedDB(t, "floororder")
	const n = 500
	// v runs through 0..n-1 in an order of its own (7 is prime to n).
	if _, err := db.ExecContext(ctx, "CREATE TABLE queue (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, v INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	values := make([]string, n)
	for i := range values {
		values[i] = fmt.Sprintf("(%d,%d)", i, i*7%n)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO queue (id, v) VALUES "+strings.Join(values, ",")); err != nil {
		t.Fatal(err)
	}
	f := &Floor{N: n, Name: "floororder", db: db}
	load := func(tbl FloorTable) (ids, vs []int) {
		t.Helper()
		s, err := f.load(ctx, tbl)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range s.rows {
			id, err1 := strconv.Atoi(r[0].(string))
			v, err2 := strconv.Atoi(r[1].(string))
			if err1 != nil || err2 != nil {
				t.Fatalf("row %v", r)
			}
			ids, vs = append(ids, id), append(vs, v)
		}
		return ids, vs
	}
	byID, _ := load(FloorTable{Source: "queue", OrderBy: "id"})
	if len(byID) != n || !slices.IsSorted(byID) {
		t.Fatalf("OrderBy id: %d rows, sorted %v", len(byID), slices.IsSorted(byID))
	}
	if _, byV := load(FloorTable{Source: "queue", OrderBy: "v"}); !slices.IsSorted(byV) {
		t.Error("OrderBy v: rows not in v's order")
	}
	shuffled, _ := load(FloorTable{Source: "queue", OrderBy: "id", Shuffle: true})
	// A random order of n rows falls at about half its steps (sd about
	// sqrt(n/12)); a quarter is some 20 sd away.
	descents := 0
	for i := 1; i < len(shuffled); i++ {
		if shuffled[i] < shuffled[i-1] {
			descents++
		}
	}
	if descents < n/4 {
		t.Errorf("shuffled: %d descents in %d rows, want a random order", descents, n)
	}
	slices.Sort(shuffled)
	if !slices.Equal(shuffled, byID) {
		t.Error("shuffled: not the same rows")
	}
	if _, err := f.load(ctx, FloorTable{Source: "queue"}); err == nil || !strings.Contains(err.Error(), "OrderBy") {
		t.Errorf("no OrderBy: err %v", err)
	}
}

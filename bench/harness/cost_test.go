package harness

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/notiflow/notiflow/lib/testkit"
)

func TestComputeCostSplitsSetupAndRunWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	begin := CostSnapshot{At: t0, CPU: map[string]float64{"mariadb": 10, "sink": 1}, Rows: map[string]int64{"Handler_write": 100}}
	due := CostSnapshot{At: t0.Add(3 * time.Second), CPU: map[string]float64{"mariadb": 12, "sink": 1.5}, Rows: map[string]int64{"Handler_write": 1100}}
	end := CostSnapshot{At: t0.Add(5 * time.Second), CPU: map[string]float64{"mariadb": 14, "sink": 2.5, "gone": 1}, Rows: map[string]int64{"Handler_write": 5100, "Handler_read_next": 2000}}
	c := ComputeCost(begin, due, end, 1000)
	if c.SetupCPUSec["mariadb"] != 2 || c.SetupCPUSec["sink"] != 0.5 {
		t.Errorf("setup CPU %v, want mariadb 2, sink 0.5", c.SetupCPUSec)
	}
	if c.RunCPUSec["mariadb"] != 2 || c.RunCPUSec["sink"] != 1 {
		t.Errorf("run CPU %v, want mariadb 2, sink 1", c.RunCPUSec)
	}
	if _, ok := c.RunCPUSec["gone"]; ok {
		t.Errorf("a process missing from the due snapshot has run CPU: %v", c.RunCPUSec)
	}
	want := map[string]float64{"mariadb": 2000, "sink": 1000, "total": 3000}
	for k, v := range want {
		if c.CPUMicrosPerNotification[k] != v {
			t.Errorf("cpuMicrosPerNotification[%s] = %v, want %v", k, c.CPUMicrosPerNotification[k], v)
		}
	}
	if c.RunWindowSec != 2 {
		t.Errorf("run window %vs, want 2", c.RunWindowSec)
	}
	if c.MariaDBRowsPerNotification["written"] != 4 || c.MariaDBRowsPerNotification["readNext"] != 2 {
		t.Errorf("rows per notification %v, want written 4, readNext 2", c.MariaDBRowsPerNotification)
	}
}

// TestComputeCostJITShare: a JVM's JIT share is its compiler threads' CPU
// over its own in the run window; a process without compiler threads, or
// without a JIT reading at the due time, has none.
func TestComputeCostJITShare(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	due := CostSnapshot{At: t0, CPU: map[string]float64{"kafka": 10, "redis": 1, "other": 1}, JIT: map[string]float64{"kafka": 4}}
	end := CostSnapshot{At: t0.Add(time.Second), CPU: map[string]float64{"kafka": 14, "redis": 2, "other": 2}, JIT: map[string]float64{"kafka": 5, "other": 1}}
	c := ComputeCost(due, due, end, 1000)
	if len(c.JITShare) != 1 || c.JITShare["kafka"] != 0.25 {
		t.Errorf("JIT share %v, want kafka 0.25 only", c.JITShare)
	}
	if c := ComputeCost(due, due, CostSnapshot{At: end.At, CPU: end.CPU}, 1000); c.JITShare != nil {
		t.Errorf("JIT share %v without a JIT reading at the end, want none", c.JITShare)
	}
}

// TestCostRecorderReadsTheBrokersJIT: the recorder's snapshots carry the
// JIT compiler threads' CPU of the local Kafka broker (make deps's, found
// by its pid file), a JVM that has compiled code by the time it serves.
func TestCostRecorderReadsTheBrokersJIT(t *testing.T) {
	root, err := testkit.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	pid, ok := testkit.DepPids(root)["kafka"]
	if !ok {
		t.Fatal("no local Kafka broker (.deps/kafka/kafka.pid): start it with make deps")
	}
	r := NewCostRecorder(map[string]int{"kafka": pid}, nil)
	for range 3 { // the first read lists the broker's threads, the others reuse it
		s := r.Take(context.Background())
		if jit, ok := s.JIT["kafka"]; !ok || jit <= 0 || jit > s.CPU["kafka"] {
			t.Fatalf("broker JIT CPU %v (found %v) of %v in all, want above 0 and at most the broker's", jit, ok, s.CPU["kafka"])
		}
	}
}

func TestCostRecorderAtPicksFirstSnapshotAfter(t *testing.T) {
	r := NewCostRecorder(map[string]int{"self": os.Getpid()}, nil)
	a := r.Take(context.Background())
	time.Sleep(2 * time.Millisecond) // distinct timestamps, not synchronisation
	b := r.Take(context.Background())
	if got, ok := r.At(a.At.Add(time.Nanosecond)); !ok || !got.At.Equal(b.At) {
		t.Errorf("At just after the first snapshot = %v (%v), want the second (%v)", got.At, ok, b.At)
	}
	if got, ok := r.At(b.At.Add(time.Second)); ok || !got.At.Equal(b.At) {
		t.Errorf("At after every snapshot = %v (%v), want the last with false", got.At, ok)
	}
	if _, ok := b.CPU["self"]; !ok {
		t.Errorf("no CPU time read for this process: %v", b.CPU)
	}
}

// TestTakeCostSnapshotReadsMariaDB reads the row counters of the real
// server and sees a write move Handler_write.
func TestTakeCostSnapshotReadsMariaDB(t *testing.T) {
	dsn := os.Getenv("NOTIFLOW_TEST_MYSQL_DSN")
	if dsn == "" {
		t.Fatal("NOTIFLOW_TEST_MYSQL_DSN is not set (make test sets it)")
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one session: the temporary table is the session's
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TEMPORARY TABLE cost_probe (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	before, err := TakeCostSnapshot(ctx, nil, nil, db)
	if err != nil {
		t.Fatal(err)
	}
	for counter := range RowCounters {
		if _, ok := before.Rows[counter]; !ok {
			t.Errorf("counter %s not read: %v", counter, before.Rows)
		}
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO cost_probe VALUES (1), (2), (3)"); err != nil {
		t.Fatal(err)
	}
	after, err := TakeCostSnapshot(ctx, nil, nil, db)
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Rows["Handler_write"] - before.Rows["Handler_write"]; d < 3 {
		t.Errorf("Handler_write moved by %d over a 3-row insert", d)
	}
}

package harness

import (
	"github.com/notiflow/notiflow/lib/testkit"

	"context"
	"database/sql"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RowCounters are the MariaDB status counters of row work that the cost
// report turns into rows per notification, by the report's name for each.
var RowCounters = map[string]string{
	"Handler_write":     "written",
	"Handler_read_key":  "readByKey",
	"Handler_read_next": "readNext",
	"Handler_delete":    "deleted",
	"Handler_update":    "updated",
}

// CostSnapshot is the cumulative CPU seconds of a set of processes and
// MariaDB's row counters at one instant.
type CostSnapshot struct {
	At   time.Time
	CPU  map[string]float64 // by process name; a process not readable is absent
	Rows map[string]int64   // by RowCounters key; empty when MariaDB was not read
	// JIT is the CPU seconds of the JIT compiler threads of the JVMs
	// among the processes, by name (absent when not readable).
	JIT map[string]float64
}

// jvms names the processes of a cost recorder that are Java virtual
// machines (Kafka's broker, named as testkit.DepPids names it), whose JIT
// compiler threads' CPU its snapshots also read: a broker just started
// compiles its code for dozens of runs, and a run's Kafka figure is then
// largely warm-up (bench/README.md).
var jvms = []string{"kafka"}

// jitThreads are the name prefixes of HotSpot's JIT compiler threads
// ("C2 CompilerThread0", cut by the kernel to 15 bytes).
var jitThreads = []string{"C1 CompilerThre", "C2 CompilerThre"}

// TakeCostSnapshot reads the CPU time of pids, the JIT compiler threads'
// CPU of the JVMs in jit (by process name; nil: none) and, when db is not nil,
// MariaDB's global row counters (SHOW GLOBAL STATUS: the whole server, so
// a run's report includes every client's work, the benchmark's own
// observation too).
func TakeCostSnapshot(ctx context.Context, pids map[string]int, jit map[string]*testkit.Threads, db *sql.DB) (CostSnapshot, error) {
	s := CostSnapshot{At: time.Now(), CPU: map[string]float64{}, Rows: map[string]int64{}, JIT: map[string]float64{}}
	for name, pid := range pids {
		if v := testkit.ProcessCPUSeconds(pid); v >= 0 {
			s.CPU[name] = v
		}
	}
	for name, threads := range jit {
		if v := threads.CPUSeconds(); v >= 0 {
			s.JIT[name] = v
		}
	}
	if db == nil {
		return s, nil
	}
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Handler_write','Handler_read_key','Handler_read_next','Handler_delete','Handler_update')")
	if err != nil {
		return s, fmt.Errorf("read mariadb row counters: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, val string
		if err := rows.Scan(&name, &val); err != nil {
			return s, fmt.Errorf("read mariadb row counters: %w", err)
		}
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			return s, fmt.Errorf("mariadb counter %s = %q: %w", name, val, err)
		}
		s.Rows[name] = n
	}
	return s, rows.Err()
}

// Cost is where a run's CPU and MariaDB row work went: setup (from the
// benchmark's start to the run's due time) apart from the run window (due
// time to the last notification persisted), and the run window per
// notification.
type Cost struct {
	// SetupCPUSec and RunCPUSec are CPU seconds by process.
	SetupCPUSec map[string]float64 `json:"setupCpuSec"`
	RunCPUSec   map[string]float64 `json:"runCpuSec"`
	// RunWindowSec is how long the measured run window lasted: from the
	// snapshot at the due time to the first one taken once the last
	// notification was persisted (at most one snapshot interval longer
	// than the report's totalSec).
	RunWindowSec float64 `json:"runWindowSec"`
	// CPUMicrosPerNotification is the run window's CPU microseconds per
	// notification, by process and in "total" over all of them.
	CPUMicrosPerNotification map[string]float64 `json:"cpuMicrosPerNotification"`
	// MariaDBRowsPerNotification is MariaDB's row work in the run window
	// per notification (written, readByKey, readNext, deleted, updated).
	MariaDBRowsPerNotification map[string]float64 `json:"mariadbRowsPerNotification,omitempty"`
	// JITShare is, for each JVM (jvms), the share of its run-window CPU
	// its JIT compiler threads used (0 to 1): high while the JVM is
	// still warming up, when its figure overstates its steady cost.
	JITShare map[string]float64 `json:"jitShare,omitempty"`
}

// ColdJIT is the JITShare above which a run's report warns that a JVM
// was still compiling its code.
const ColdJIT = 0.1

// ComputeCost derives the cost of a run of n notifications from snapshots
// at the benchmark's start, the due time and the run's end.
func ComputeCost(start, due, end CostSnapshot, n int64) Cost {
	c := Cost{
		SetupCPUSec: cpuDelta(start, due), RunCPUSec: cpuDelta(due, end),
		RunWindowSec:             round(end.At.Sub(due.At).Seconds(), 3),
		CPUMicrosPerNotification: map[string]float64{},
	}
	if n <= 0 {
		return c
	}
	c.CPUMicrosPerNotification = perNotification(c.RunCPUSec, n)
	for name, end := range end.JIT {
		start, ok := due.JIT[name]
		if cpu := c.RunCPUSec[name]; ok && cpu > 0 {
			if c.JITShare == nil {
				c.JITShare = map[string]float64{}
			}
			c.JITShare[name] = round(min(max(end-start, 0)/cpu, 1), 2)
		}
	}
	if len(due.Rows) > 0 && len(end.Rows) > 0 {
		c.MariaDBRowsPerNotification = map[string]float64{}
		for counter, name := range RowCounters {
			c.MariaDBRowsPerNotification[name] = round(float64(end.Rows[counter]-due.Rows[counter])/float64(n), 2)
		}
	}
	return c
}

// perNotification is the CPU microseconds per notification of each
// process of sec (CPU seconds by name) over n notifications, and of all of
// them as "total"; empty when n is not positive.
func perNotification(sec map[string]float64, n int64) map[string]float64 {
	out := make(map[string]float64, len(sec)+1)
	if n <= 0 {
		return out
	}
	var total float64
	for name, s := range sec {
		out[name] = round(s*1e6/float64(n), 1)
		total += s
	}
	out["total"] = round(total*1e6/float64(n), 1)
	return out
}

func cpuDelta(from, to CostSnapshot) map[string]float64 {
	out := map[string]float64{}
	for name, v := range to.CPU {
		if f, ok := from.CPU[name]; ok {
			out[name] = round(v-f, 2)
		}
	}
	return out
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// CostRecorder keeps snapshots taken while a run goes on, so that the one
// nearest after a moment known only later (the last notification's
// persistence) can be picked. It is safe for concurrent use.
type CostRecorder struct {
	pids map[string]int
	db   *sql.DB

	jitMu sync.Mutex // a testkit.Threads is not safe for concurrent use
	jit   map[string]*testkit.Threads

	mu    sync.Mutex
	snaps []CostSnapshot
	err   error
}

// NewCostRecorder returns a recorder of pids' CPU and, when db is not nil,
// MariaDB's row counters.
func NewCostRecorder(pids map[string]int, db *sql.DB) *CostRecorder {
	r := &CostRecorder{pids: pids, db: db, jit: map[string]*testkit.Threads{}}
	for _, name := range jvms {
		if pid, ok := pids[name]; ok {
			r.jit[name] = testkit.NewThreads(pid, jitThreads...)
		}
	}
	return r
}

// Take records a snapshot and returns it; a failed MariaDB read is kept
// (see Err) and the snapshot has CPU only.
func (r *CostRecorder) Take(ctx context.Context) CostSnapshot {
	r.jitMu.Lock()
	s, err := TakeCostSnapshot(ctx, r.pids, r.jit, r.db)
	r.jitMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil && ctx.Err() == nil && r.err == nil { // a snapshot cut off by the recorder's stop is no error
		r.err = err
	}
	r.snaps = append(r.snaps, s)
	return s
}

// Err returns the first error reading MariaDB, if any.
func (r *CostRecorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Record takes a snapshot every interval until ctx ends.
func (r *CostRecorder) Record(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Take(ctx)
		}
	}
}

// At returns the first snapshot taken at or after t, or the last one taken
// when none was (false then).
func (r *CostRecorder) At(t time.Time) (CostSnapshot, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := sort.Search(len(r.snaps), func(i int) bool { return !r.snaps[i].At.Before(t) })
	if i == len(r.snaps) {
		if i == 0 {
			return CostSnapshot{}, false
		}
		return r.snaps[i-1], false
	}
	return r.snaps[i], true
}

// FormatByProcess formats per-process figures in name order, "total" last.
func FormatByProcess(m map[string]float64) string {
	names := make([]string, 0, len(m))
	for k := range m {
		if k != "total" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	if _, ok := m["total"]; ok {
		names = append(names, "total")
	}
	var b strings.Builder
	for i, k := range names {
		if i > 0 {
			b.WriteString("  ")
		}
		fmt.Fprintf(&b, "%s %.1f", k, m[k])
	}
	return b.String()
}

package service

import (
	"bufio"
	"context"
	"database/sql"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/segmentio/kafka-go"

	libconfig "github.com/notiflow/notiflow/lib/config"
	"github.com/notiflow/notiflow/lib/svc"
	"github.com/notiflow/notiflow/services/sink/internal/adapters"
	"github.com/notiflow/notiflow/services/sink/internal/config"
	"github.com/notiflow/notiflow/services/sink/internal/domain"
	"github.com/notiflow/notiflow/services/sink/internal/ports"
)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkSink measures, in one run: the raw ceiling (the sink's multi-row
// upsert straight from Go to MariaDB with database/sql, no Kafka, same
// batch size and connection count), the batched sink and the naive sink,
// each from a backlog pre-produced to a 12-partition topic, each into a
// fresh database. Run once:
//
//	go test -run '^$' -bench BenchmarkSink -benchtime=1x -timeout 30m
//
// NOTIFLOW_BENCH_RESULTS (default 100,000) results for raw and batched,
// NOTIFLOW_BENCH_NAIVE_RESULTS (default 10,000) for naive (one INSERT and
// one commit per record: 100k would take minutes; rows/s is what is
// compared). NOTIFLOW_BENCH_FLUSH_CONCURRENCY overrides the flush
// concurrency (default: the configured default).
func BenchmarkSink(b *testing.B) {
	n := envInt("NOTIFLOW_BENCH_RESULTS", 100_000)
	naiveN := envInt("NOTIFLOW_BENCH_NAIVE_RESULTS", 10_000)
	var def config.Config
	if err := libconfig.FillZero(&def); err != nil {
		b.Fatal(err)
	}
	svc.SetGCPercent(GCPercent(def)) // as main does: the whole benchmark process (raw ceiling included) runs with it
	conc := envInt("NOTIFLOW_BENCH_FLUSH_CONCURRENCY", def.FlushConcurrency)
	rounds := envInt("NOTIFLOW_BENCH_ROUNDS", 3)

	for b.Loop() {
		var raws, batcheds []float64
		var batchedMem memPeak
		for round := range rounds {
			// Alternate the order so that a drift in the machine's load
			// does not always favour the same side.
			rawFirst := round%2 == 0
			for _, which := range []bool{rawFirst, !rawFirst} {
				if which {
					e := newEnv(b, 1)
					raw := rawCeiling(b, e, e.messages(b, n), def.BatchSize, conc)
					raws = append(raws, raw.rate)
					b.Logf("round %d raw ceiling: %d rows in 200-row upserts on %d connections in %s = %.0f rows/s (peak RSS %s, peak heap %s)",
						round+1, n, conc, raw.elapsed.Round(time.Millisecond), raw.rate, mib(raw.mem.rss), mib(raw.mem.heap))
					continue
				}
				e := newEnv(b, 12)
				produceStart := time.Now()
				e.produceMsgs(b, e.messages(b, n)...)
				b.Logf("round %d: pre-produced %d results to 12 partitions in %s", round+1, n, time.Since(produceStart).Round(time.Millisecond))
				cfg := e.config(b)
				cfg.FlushConcurrency = conc
				batched := runSink(b, e, cfg, n)
				batcheds = append(batcheds, batched.rate)
				batchedMem.rss = max(batchedMem.rss, batched.mem.rss)
				batchedMem.heap = max(batchedMem.heap, batched.mem.heap)
				b.Logf("round %d batched: %d rows; first to last row %s = %.0f rows/s; start to last row %s = %.0f rows/s (peak RSS %s, peak heap %s)",
					round+1, n, batched.saturated.Round(time.Millisecond), batched.rate, batched.wall.Round(time.Millisecond), float64(n)/batched.wall.Seconds(),
					mib(batched.mem.rss), mib(batched.mem.heap))
			}
		}

		e := newEnv(b, 12)
		e.produceMsgs(b, e.messages(b, naiveN)...)
		ncfg := e.config(b)
		ncfg.Naive = true
		naive := runSink(b, e, ncfg, naiveN)
		b.Logf("naive: %d rows; first to last row %s = %.0f rows/s; start to last row %s (peak RSS %s, peak heap %s)",
			naiveN, naive.saturated.Round(time.Millisecond), naive.rate, naive.wall.Round(time.Millisecond), mib(naive.mem.rss), mib(naive.mem.heap))

		raw, batched := median(raws), median(batcheds)
		b.Logf("medians over %d rounds: raw %.0f rows/s, batched %.0f rows/s (%.0f%% of raw), naive %.0f rows/s; batched/raw per round: %s",
			rounds, raw, batched, 100*batched/raw, naive.rate, ratios(batcheds, raws))
		b.ReportMetric(raw, "raw-rows/s")
		b.ReportMetric(batched, "batched-rows/s")
		b.ReportMetric(naive.rate, "naive-rows/s")
		b.ReportMetric(100*batched/raw, "batched-%-of-raw")
		b.ReportMetric(batched/naive.rate, "batched-x-naive")
		b.ReportMetric(float64(batchedMem.rss)/(1<<20), "batched-peak-RSS-MiB")
		b.ReportMetric(float64(batchedMem.heap)/(1<<20), "batched-peak-heap-MiB")
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ratios(a, b []float64) string {
	var parts []string
	for i := range min(len(a), len(b)) {
		parts = append(parts, strconv.FormatFloat(100*a[i]/b[i], 'f', 0, 64)+"%")
	}
	return strings.Join(parts, " ")
}

// messages returns the records of results 0..n-1.
func (e *env) messages(tb testing.TB, n int) []kafka.Message {
	out := make([]kafka.Message, n)
	for i := range n {
		out[i] = e.message(tb, e.result(i))
	}
	return out
}

type sinkRun struct {
	wall, saturated time.Duration
	rate            float64
	mem             memPeak
}

// runSink starts the sink on a backlog of n results and waits until all
// are persisted. rate is measured from the first to the last persisted
// row (the consumer is saturated all along: the backlog is there before it
// starts), wall from start to the last row (group join included).
func runSink(b *testing.B, e *env, cfg config.Config, n int) sinkRun {
	b.Helper()
	freeMemory()
	mem := sampleMemory()
	cpu := readCPU()
	begin := time.Now()
	r := start(b, cfg)
	for r.metric("notiflow_sink_results_total") < float64(n) {
		time.Sleep(20 * time.Millisecond)
	}
	wall := time.Since(begin)
	peak := mem.stop()
	used := readCPU().since(cpu)
	sum, count := histogram(r.reg, "notiflow_sink_flush_seconds")
	b.Logf("sink %s; %d flushes, mean %.1f ms, %v statement errors",
		used, count, 1000*sum/float64(max(count, 1)), r.metric("notiflow_sink_flush_errors_total"))
	if err := r.Stop(); err != nil {
		b.Fatal(err)
	}
	if got := e.rows(b); got != n {
		b.Fatalf("%d rows, want %d", got, n)
	}
	var first, last time.Time
	if err := e.db.QueryRow(`SELECT MIN(persisted_at), MAX(persisted_at) FROM `+e.table).Scan(&first, &last); err != nil {
		b.Fatal(err)
	}
	sat := last.Sub(first)
	return sinkRun{wall: wall, saturated: sat, rate: float64(n) / sat.Seconds(), mem: peak}
}

type rawRun struct {
	elapsed time.Duration
	rate    float64
	mem     memPeak
}

// rawCeiling writes the same results as the sink would (decoded, collapsed
// per batch, the same statement and arguments: every row is new, so the
// sink's plain INSERT succeeds and its merging fallback never runs) with database/sql on conns
// connections, no Kafka and no gorm.
func rawCeiling(b *testing.B, e *env, msgs []kafka.Message, batchSize, conns int) rawRun {
	b.Helper()
	ctx := context.Background()
	store, err := adapters.Open(ctx, e.dsn, adapters.Options{MaxConns: 1})
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	_ = store.Close()
	var batches [][]domain.Row
	for i := 0; i < len(msgs); i += batchSize {
		var rs []*domain.Result
		for j := i; j < min(i+batchSize, len(msgs)); j++ {
			r, err := ports.Decode(&msgs[j])
			if err != nil {
				b.Fatal(err)
			}
			rs = append(rs, &r)
		}
		batches = append(batches, domain.Collapse(rs))
	}
	dsn, err := adapters.NormalizeDSN(e.dsn, true)
	if err != nil {
		b.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	freeMemory()
	mem := sampleMemory()
	cpu := readCPU()
	ch := make(chan []domain.Row)
	var wg sync.WaitGroup
	begin := time.Now()
	for range conns {
		wg.Go(func() {
			for rows := range ch {
				args := make([]any, 0, len(rows)*19)
				for i := range rows {
					args = adapters.AppendArgs(args, &rows[i])
				}
				if _, err := db.ExecContext(ctx, adapters.InsertSQL(len(rows)), args...); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for _, rows := range batches {
		ch <- rows
	}
	close(ch)
	wg.Wait()
	elapsed := time.Since(begin)
	peak := mem.stop()
	b.Logf("raw %s", readCPU().since(cpu))
	if got := e.rows(b); got != len(msgs) {
		b.Fatalf("raw: %d rows, want %d", got, len(msgs))
	}
	return rawRun{elapsed: elapsed, rate: float64(len(msgs)) / elapsed.Seconds(), mem: peak}
}

// memPeak is the highest resident set size and live heap seen.
type memPeak struct{ rss, heap uint64 }

type memSampler struct {
	done chan struct{}
	out  chan memPeak
}

func freeMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// sampleMemory samples RSS (/proc/self/status) and the live heap every
// 50 ms until stop. RSS is the whole test process (the benchmark's own
// data included, after a GC).
func sampleMemory() *memSampler {
	s := &memSampler{done: make(chan struct{}), out: make(chan memPeak, 1)}
	go func() {
		var peak memPeak
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			peak.rss = max(peak.rss, rss())
			metrics.Read(sample)
			peak.heap = max(peak.heap, sample[0].Value.Uint64())
			select {
			case <-s.done:
				s.out <- peak
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *memSampler) stop() memPeak {
	close(s.done)
	return <-s.out
}

func rss() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func mib(v uint64) string { return strconv.FormatFloat(float64(v)/(1<<20), 'f', 1, 64) + " MiB" }

// histogram returns the sample sum and count of the named histogram.
func histogram(reg interface {
	Gather() ([]*dto.MetricFamily, error)
}, name string) (float64, uint64) {
	mfs, _ := reg.Gather()
	var sum float64
	var count uint64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetHistogram().GetSampleSum()
				count += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return sum, count
}

// cpuUse is the CPU time (user + system) of this process, MariaDB and the
// Kafka broker, read from /proc (zero for a process whose pid file is
// missing): where the machine's two cores went during a phase.
type cpuUse struct{ self, mariadb, kafka time.Duration }

func readCPU() cpuUse {
	return cpuUse{
		self:    procCPU(strconv.Itoa(os.Getpid())),
		mariadb: procCPU(pidFrom("../../.deps/mariadb/mariadbd.pid")),
		kafka:   procCPU(pidFrom("../../.deps/kafka/kafka.pid")),
	}
}

func (c cpuUse) since(start cpuUse) cpuUse {
	return cpuUse{c.self - start.self, c.mariadb - start.mariadb, c.kafka - start.kafka}
}

func (c cpuUse) String() string {
	return "CPU: this process " + c.self.Round(10*time.Millisecond).String() + ", mariadbd " + c.mariadb.Round(10*time.Millisecond).String() +
		", kafka " + c.kafka.Round(10*time.Millisecond).String()
}

func pidFrom(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func procCPU(pid string) time.Duration {
	if pid == "" {
		return 0
	}
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) in ")".
	rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ = 100
}

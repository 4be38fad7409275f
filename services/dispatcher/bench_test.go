package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/simsend"
	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/dispatcher/internal/dispatchtest"
)

// BenchmarkDispatch100k measures the dispatcher end to end with real
// Kafka and Redis: 100,000 NotificationDue (12 partitions, 10,000
// recipients x 10, sim channel at 2 ms, template "welcome"
// with a name param) are produced first, then dispatcher
// processes (the real binary) are started and the clock runs until all
// 100,000 results are on the results topic. Scenarios: one replica in key
// mode, one in partition mode, two replicas in key mode.
//
//	go test -run '^$' -bench Dispatch100k -benchtime 1x -timeout 30m .
//
// Progress is polled from the results topic's end offsets (the records
// are read and verified after the clock stopped). Reported: events/s from
// the first to the last result (saturated rate)
// and from process start (including the group join), the peak RSS of each
// replica and its heap in use at the end. DISPATCH_BENCH_ENV adds
// NOTIFLOW_* settings to the replicas ("NOTIFLOW_WORKERS=256 ...");
// DISPATCH_BENCH_PROFILE=file.pprof saves a 10 s CPU profile of the first
// replica taken mid-run; DISPATCH_BENCH_METRICS=file saves the replicas'
// /metrics at the end, DISPATCH_BENCH_ALLOCS=file the first replica's
// allocation profile; DISPATCH_BENCH_BINARY=path runs another build of the
// dispatcher (A/B comparisons).
func BenchmarkDispatch100k(b *testing.B) {
	for _, sc := range []struct {
		name     string
		ordering string
		replicas int
	}{
		{"key-1replica", "key", 1},
		{"partition-1replica", "partition", 1},
		{"key-2replicas", "key", 2},
	} {
		b.Run(sc.name, func(b *testing.B) {
			for range b.N {
				runDispatchBench(b, sc.ordering, sc.replicas)
			}
		})
	}
}

const (
	benchEvents     = 100_000
	benchRecipients = 10_000
	benchPartitions = 12
)

func runDispatchBench(b *testing.B, ordering string, replicas int) {
	b.StopTimer()
	env := baseEnv(b, benchPartitions)
	env["NOTIFLOW_ORDERING"] = ordering
	env["NOTIFLOW_SIM_LATENCY"] = "2ms"
	env["NOTIFLOW_LOG_LEVEL"] = "warn"
	env["NOTIFLOW_PPROF"] = "true"
	for _, kv := range strings.Fields(os.Getenv("DISPATCH_BENCH_ENV")) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	brokers := strings.Split(env["NOTIFLOW_KAFKA_BROKERS"], ",")
	runID := testkit.ID("bench")
	base := time.Now().Add(-time.Minute).UnixMicro()
	dues := make([]*notiflowv1.NotificationDue, 0, benchEvents)
	for s := range benchEvents / benchRecipients {
		for r := range benchRecipients {
			dues = append(dues, &notiflowv1.NotificationDue{
				NotificationId: fmt.Sprintf("%s-%d-%d", runID, r, s), TargetId: uint64(r + 1),
				RecipientId: "rcp-" + strconv.Itoa(r), Channel: notiflowv1.Channel_CHANNEL_SIM, TemplateId: "welcome",
				ParamsJson: []byte(`{"name":"user ` + strconv.Itoa(r) + `"}`), DueAtUs: base, OccurrenceAtUs: base + int64(s)*1_000_000,
				Sequence: uint64(s + 1), RunId: runID, CreatedAtUs: base,
			})
		}
	}
	dispatchtest.Produce(b, brokers, env["NOTIFLOW_TOPIC_DUE"], dues)
	topic := env["NOTIFLOW_TOPIC_DISPATCHED"]

	b.StartTimer()
	start := time.Now()
	procs := make([]*proc, replicas)
	for i := range procs {
		procs[i] = startProc(b, fmt.Sprintf("replica%d", i), env)
	}
	var heapMu sync.Mutex
	peakHeap := make([]float64, replicas)
	sampleCtx, stopSampling := context.WithCancel(context.Background())
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
			}
			for i, p := range procs {
				h := p.metric("go_memstats_heap_inuse_bytes")
				heapMu.Lock()
				peakHeap[i] = max(peakHeap[i], h)
				heapMu.Unlock()
			}
		}
	})
	// Progress is the sum of the results topic's end offsets, polled: the
	// results are read (and checked) only after the clock stopped, so
	// that reading them does not compete with the dispatcher for CPU.
	var mu sync.Mutex
	var first time.Time
	done := 0
	progress := func() int {
		mu.Lock()
		defer mu.Unlock()
		return done
	}
	if path := os.Getenv("DISPATCH_BENCH_PROFILE"); path != "" {
		sampler.Go(func() { profile(b, sampleCtx, procs[0], progress, path) })
	}
	deadline := time.Now().Add(20 * time.Minute)
	for {
		n, err := dispatchtest.EndOffsets(context.Background(), brokers, topic, benchPartitions)
		if err == nil {
			mu.Lock()
			if n > 0 && first.IsZero() {
				first = time.Now()
			}
			done = int(n)
			mu.Unlock()
		}
		if n >= benchEvents {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d results after 20 minutes", n, benchEvents)
		}
		time.Sleep(20 * time.Millisecond)
	}
	last := time.Now()
	end := last
	b.StopTimer()
	if path := os.Getenv("DISPATCH_BENCH_ALLOCS"); path != "" {
		_, body, _ := procs[0].get("/debug/pprof/allocs")
		_ = os.WriteFile(path, []byte(body), 0o644)
	}
	if path := os.Getenv("DISPATCH_BENCH_METRICS"); path != "" {
		var dump strings.Builder
		for _, p := range procs {
			_, body, _ := p.get("/metrics")
			fmt.Fprintf(&dump, "# %s %s x%d\n%s", p.Name, ordering, replicas, body)
		}
		_ = os.WriteFile(path, []byte(dump.String()), 0o644)
	}
	stopSampling()
	sampler.Wait()

	saturated := float64(benchEvents-1) / last.Sub(first).Seconds()
	overall := float64(benchEvents) / end.Sub(start).Seconds()
	b.ReportMetric(saturated, "events/s")
	b.ReportMetric(overall, "events/s-incl-startup")
	var rss []string
	for i, p := range procs {
		hwm := statusKB(p.Cmd.Process.Pid, "VmHWM")
		b.ReportMetric(cpuSeconds(p.Cmd.Process.Pid), fmt.Sprintf("cpu-s-r%d", i))
		b.ReportMetric(float64(hwm)/1024, fmt.Sprintf("MiB-peak-rss-r%d", i))
		b.ReportMetric(peakHeap[i]/(1<<20), fmt.Sprintf("MiB-peak-heap-r%d", i))
		rss = append(rss, fmt.Sprintf("replica%d peak RSS %.0f MiB, peak heap in use %.0f MiB", i, float64(hwm)/1024, peakHeap[i]/(1<<20)))
	}
	b.Logf("%s x%d: %d results in %.1fs from start (%.0f/s), %.1fs first to last result (%.0f/s); %s",
		ordering, replicas, benchEvents, end.Sub(start).Seconds(), overall, last.Sub(first).Seconds(), saturated, strings.Join(rss, "; "))

	results := dispatchtest.Collect(b, brokers, topic, benchPartitions)
	verifyBench(b, results.WaitLen(b, benchEvents, 5*time.Minute), env, runID)
}

// verifyBench checks the run: every result delivered, once, in order per
// recipient on the results topic, and the simulated provider's own count
// says every occurrence was sent exactly once.
func verifyBench(b *testing.B, recs []dispatchtest.Record, env map[string]string, runID string) {
	rs := dispatchtest.Results(b, recs)
	ids := make(map[string]struct{}, len(rs))
	rcps, seqs := make([]string, len(rs)), make([]uint64, len(rs))
	for i, r := range rs {
		if r.Status != notiflowv1.Status_STATUS_DELIVERED {
			b.Fatalf("%s: %s (%s)", r.NotificationId, r.Status, r.Error)
		}
		ids[r.NotificationId] = struct{}{}
		rcps[i], seqs[i] = r.RecipientId, r.Sequence
	}
	if len(ids) != benchEvents {
		b.Fatalf("%d distinct notifications in %d results, want %d", len(ids), len(rs), benchEvents)
	}
	if err := dispatchtest.CheckOrder(rcps, seqs); err != nil {
		b.Fatalf("results topic order: %v", err)
	}
	rdb, _ := testkit.Redis(b)
	sends := rdb.HGetAll(context.Background(), simsend.Key(env["NOTIFLOW_REDIS_PREFIX"], runID)).Val()
	dup := 0
	for _, n := range sends {
		if n != "1" {
			dup++
		}
	}
	if len(sends) != benchEvents || dup != 0 {
		b.Fatalf("sim counted %d occurrences, %d sent more than once; want %d, 0", len(sends), dup, benchEvents)
	}
}

// profile saves a 10 s CPU profile of p once a tenth of the results are in.
func profile(b *testing.B, ctx context.Context, p *proc, progress func() int, path string) {
	for progress() < benchEvents/10 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get("http://" + p.addr + "/debug/pprof/profile?seconds=10")
	if err != nil {
		b.Logf("profile: %v", err)
		return
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Logf("profile: %v", err)
	}
}

// statusKB reads a kB field (VmHWM, VmRSS) of /proc/<pid>/status.
func statusKB(pid int, field string) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, field+":") {
			n, _ := strconv.Atoi(strings.Fields(line)[1])
			return n
		}
	}
	return 0
}

// cpuSeconds is the user+system CPU time process pid used so far.
func cpuSeconds(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may contain spaces).
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

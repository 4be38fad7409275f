package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/notiflow/notiflow/bench/harness"
	"github.com/notiflow/notiflow/bench/receiver"
	"github.com/notiflow/notiflow/lib/benchreport"
	"github.com/notiflow/notiflow/lib/testkit"
)

// options are the knobs of one benchmark run.
type options struct {
	Notifications int           `json:"notifications"`
	Recipients    int           `json:"recipients"`
	Partitions    int           `json:"partitions"`
	Dispatchers   int           `json:"dispatchers"`
	Workers       int           `json:"dispatcherWorkers"`
	Ordering      string        `json:"ordering"`
	SinkBatch     int           `json:"sinkBatch"`
	SinkIdle      time.Duration `json:"sinkIdle"`
	SinkNaive     bool          `json:"sinkNaive"`
	Channel       string        `json:"channel"`
	SimLatency    time.Duration `json:"simLatency"`
	// ReceiverDelay is the webhook receiver's answer delay (channel
	// webhook).
	ReceiverDelay time.Duration `json:"receiverDelay,omitempty"`
	Floor         bool          `json:"floor"`
	// FloorOrder is the order the floor writes the notifications rows in
	// (floorOrders).
	FloorOrder string `json:"floorOrder,omitempty"`
	// Keep leaves the run's database and Redis keys in place after it.
	Keep bool `json:"keep,omitempty"`
	// Profile, when set, is the directory where the run leaves a CPU
	// profile of every service and a summary of MariaDB's statements
	// (profile.go); ProfileSpan is the profiles' span.
	Profile     string        `json:"profile,omitempty"`
	ProfileSpan time.Duration `json:"-"`
	Timeout     time.Duration `json:"-"`
	Out         string        `json:"-"`
}

func (o *options) register(fs *flag.FlagSet) {
	fs.IntVar(&o.Notifications, "notifications", 100_000, "notifications in the run")
	fs.IntVar(&o.Recipients, "recipients", 10_000, "distinct recipients")
	fs.IntVar(&o.Partitions, "partitions", 12, "partitions of each topic")
	fs.IntVar(&o.Dispatchers, "dispatchers", 2, "dispatcher replicas (processes)")
	fs.IntVar(&o.Workers, "workers", 0, "dispatcher workers per replica (0: the service default)")
	fs.StringVar(&o.Ordering, "ordering", "key", "dispatcher ordering: key, partition or unordered")
	fs.IntVar(&o.SinkBatch, "sink-batch", 200, "sink batch size")
	fs.DurationVar(&o.SinkIdle, "sink-idle", time.Second, "sink idle flush")
	fs.BoolVar(&o.SinkNaive, "sink-naive", false, "sink naive mode: one INSERT and one commit per record")
	fs.StringVar(&o.Channel, "channel", "sim", "channel of the notifications: sim, inbox or webhook")
	fs.DurationVar(&o.SimLatency, "sim-latency", 2*time.Millisecond, "simulated provider latency")
	fs.DurationVar(&o.ReceiverDelay, "receiver-delay", receiver.DefaultDelay, "channel webhook: how long the receiver waits before answering each call")
	fs.BoolVar(&o.Floor, "floor", true, "after the run, measure the floor on its rows (floorPerSecond, floorRatio)")
	fs.StringVar(&o.FloorOrder, "floor-order", floorOrderKey, "the order the floor writes the notifications rows in: key (their primary key's), arrival (the order the run's sink wrote them: by statement, within one by notification id) or random")
	fs.BoolVar(&o.Keep, "keep", false, "keep the run's database (nf_bench_<time>) and Redis keys (nf:bench_<time>:*) after it, for inspection")
	fs.StringVar(&o.Profile, "profile", "", "directory for a CPU profile of every service and a summary of MariaDB's statements over the run window (logging every statement slows MariaDB: compare rates only between runs alike)")
	fs.DurationVar(&o.ProfileSpan, "profile-seconds", 5*time.Second, "with -profile: the CPU profiles' span from the due time")
	fs.DurationVar(&o.Timeout, "timeout", 15*time.Minute, "give up on the run after this long")
}

// result is what a run writes to its JSON file.
type result struct {
	Config options        `json:"config"`
	Run    *harness.Run   `json:"run"`
	RSSMiB map[string]int `json:"rssMiB,omitempty"`
	// CPUSec is the CPU time each process (services and dependencies) used
	// from the benchmark's start to its end: where the machine's two cores
	// went.
	CPUSec map[string]float64 `json:"cpuSec,omitempty"`
	// Cost splits CPU into setup and run window and gives the run window's
	// CPU and MariaDB row work per notification (the webhook receiver's
	// CPU is not in it).
	Cost *harness.Cost `json:"cost,omitempty"`
	// Receiver is the webhook receiver's counters and CPU (channel
	// webhook only; its CPU is not in CPUSec).
	Receiver *receiverResult `json:"receiver,omitempty"`
	// Floor is the least work of the same run with none of notiflow's
	// logic (see floor.go), FloorPerSecond its rate and FloorRatio the
	// run's msgsPerSecond over it.
	Floor          *harness.FloorResult `json:"floor,omitempty"`
	FloorPerSecond float64              `json:"floorPerSecond,omitempty"`
	FloorRatio     float64              `json:"floorRatio,omitempty"`
}

func cmdRun(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var o options
	o.register(fs)
	fs.StringVar(&o.Out, "out", "bench/results/latest.json", "where to write the report (JSON)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	root, err := harness.Root()
	if err != nil {
		return err
	}
	res, err := benchmark(ctx, root, o)
	if res != nil && res.Run != nil && res.Run.Report != nil {
		printReport("notiflow benchmark", res)
		if werr := writeJSON(outPath(root, o.Out), res); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

// benchmark runs one benchmark on a stack of its own and stops it after.
func benchmark(ctx context.Context, root string, o options) (_ *result, err error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if err := harness.DepsUp(ctx, root); err != nil {
		return nil, err
	}
	fmt.Println("building the services")
	binDir := filepath.Join(root, "bin")
	if err := harness.Build(ctx, root, binDir); err != nil {
		return nil, err
	}
	deps := harness.LocalDeps()
	iso := harness.NewIsolation("bench_" + time.Now().UTC().Format("20060102_150405"))
	if err := iso.Create(ctx, deps); err != nil {
		return nil, err
	}
	defer func() { _ = iso.DeleteTopics(context.Background(), deps) }()
	// Deferred before the stack's stop, so it runs after it. A failed
	// run's data stays for inspection.
	defer func() {
		if o.Keep || err != nil {
			fmt.Printf("the run's data stays: database %s, redis keys %s*\n", iso.Database, iso.RedisPrefix)
			return
		}
		if rerr := iso.Remove(context.Background(), deps); rerr != nil {
			fmt.Printf("removing the run's data: %v\n", rerr)
		}
	}()
	stack, token, err := runStack(root, binDir, iso, deps, o.Partitions)
	if err != nil {
		return nil, err
	}
	defer stack.StopAll(30 * time.Second)
	var recv *webhookReceiver
	if o.Channel == channelWebhook {
		if recv, err = startWebhookReceiver(ctx, stack.LogDir, o.ReceiverDelay); err != nil {
			return nil, err
		}
		defer recv.proc.Stop(10 * time.Second)
	}
	db, err := sql.Open("mysql", deps.MySQLDSN)
	if err != nil {
		return nil, fmt.Errorf("open mariadb for its row counters: %w", err)
	}
	defer db.Close()
	prof, err := newProfiler(ctx, root, o, db, iso.Database)
	if err != nil {
		return nil, err
	}
	if prof != nil {
		defer prof.restore()
	}
	sched, err := startTrio(ctx, stack, iso, o, nil)
	if err != nil {
		return nil, err
	}
	admin := &harness.Admin{Base: "http://" + sched.Addr, Token: token}
	pids := testkit.DepPids(root)
	for _, p := range stack.Procs("") {
		pids[p.Name] = p.Pid()
	}
	costs := harness.NewCostRecorder(maps.Clone(pids), db) // the services and dependencies only
	begin := costs.Take(ctx)
	req := harness.BenchmarkRequest{
		Notifications: o.Notifications, Recipients: o.Recipients, Channel: o.Channel,
		SimLatencyMs: int(o.SimLatency / time.Millisecond),
	}
	var progress func(context.Context) string
	if recv != nil {
		pids[receiverName] = recv.proc.Pid()
		req.SimLatencyMs, req.WebhookURL, req.WebhookSecret = 0, recv.proc.URL(), recv.secret
		progress = recv.progress
	}
	cpu := harness.StartCPUMeter(pids)
	run, err := admin.StartBenchmark(ctx, req)
	if err != nil {
		return nil, err
	}
	fmt.Printf("run %s started: %d notifications to %d recipients over %s, %d dispatcher(s), %s ordering, sink %s\n",
		run.ID, o.Notifications, o.Recipients, o.Channel, o.Dispatchers, o.Ordering, sinkMode(o))
	recCtx, stopRec := context.WithCancel(ctx)
	recDone := make(chan struct{})
	go func() {
		defer close(recDone)
		recordCosts(recCtx, costs, run.DueAt)
	}()
	if prof != nil {
		prof.start(ctx, run.DueAt, stack.Procs(""), token)
	}
	run, err = follow(ctx, admin, run.ID, o.Timeout, progress)
	stopRec()
	<-recDone
	if err != nil {
		return nil, err
	}
	if prof != nil && run.Report != nil {
		// A profile that failed costs the profile, not the run's result.
		if err := prof.finish(ctx, run); err != nil {
			fmt.Fprintf(os.Stderr, "profile the run (its report stands): %v\n", err)
		}
	}
	res := &result{Config: o, Run: run, RSSMiB: map[string]int{}, CPUSec: cpu.Stop()}
	if run.Report != nil {
		res.Cost = runCost(costs, begin, run)
	}
	for _, p := range stack.Procs("") {
		if kb := p.PeakRSSKiB(); kb > 0 {
			res.RSSMiB[p.Name] = kb / 1024
		}
	}
	if recv != nil {
		cpuSec := res.CPUSec[receiverName]
		delete(res.CPUSec, receiverName)
		if res.Receiver, err = recv.result(ctx, cpuSec); err != nil {
			return res, err
		}
	}
	if run.Status != "done" || run.Report == nil {
		return res, fmt.Errorf("run %s ended %s: %s", run.ID, run.Status, run.Error)
	}
	if res.Receiver != nil {
		if err := res.Receiver.check(run.Report.Eligible); err != nil {
			return res, err
		}
	}
	if o.Floor {
		stack.StopAll(30 * time.Second) // the floor runs alone on the dependencies
		if recv != nil {
			recv.proc.Stop(10 * time.Second)
		}
		if err := measureFloor(ctx, res, root, iso, deps, o); err != nil {
			return res, err
		}
	}
	return res, nil
}

func (o options) validate() error {
	switch {
	case o.Notifications < 1 || o.Recipients < 1 || o.Partitions < 1 || o.Dispatchers < 1:
		return errors.New("notifications, recipients, partitions and dispatchers must be positive")
	case o.Channel != "sim" && o.Channel != "inbox" && o.Channel != channelWebhook:
		return fmt.Errorf("channel %q: the benchmark drives sim, inbox or webhook", o.Channel)
	case o.ReceiverDelay < 0:
		return fmt.Errorf("receiver delay %s is negative", o.ReceiverDelay)
	case floorOrders[o.FloorOrder] == "":
		return fmt.Errorf("floor order %q: want key, arrival or random", o.FloorOrder)
	case o.Profile != "" && o.ProfileSpan < time.Second:
		return fmt.Errorf("profile seconds %s: want at least 1s", o.ProfileSpan)
	}
	return nil
}

func sinkMode(o options) string {
	if o.SinkNaive {
		return "naive"
	}
	return fmt.Sprintf("batch %d / idle %s", o.SinkBatch, o.SinkIdle)
}

// startTrio starts the sink, the dispatchers and the scheduler; addrs, when
// given, fixes their HTTP addresses by process name.
func startTrio(ctx context.Context, stack *harness.Stack, iso harness.Isolation, o options, addrs map[string]string) (*harness.Proc, error) {
	start := func(name, service string, env map[string]string) (*harness.Proc, error) {
		env = harness.Merge(iso.ServiceEnv(service), env)
		if a, ok := addrs[name]; ok {
			return stack.StartAt(ctx, name, service, a, env)
		}
		return stack.Start(ctx, name, service, env)
	}
	pprof := map[string]string{} // the services' profiles, for -profile
	if o.Profile != "" {
		pprof["NOTIFLOW_PPROF"] = "true"
	}
	sinkEnv := harness.Merge(pprof, map[string]string{
		"NOTIFLOW_BATCH_SIZE": fmt.Sprint(o.SinkBatch), "NOTIFLOW_BATCH_IDLE": o.SinkIdle.String(),
		"NOTIFLOW_SINK_NAIVE": fmt.Sprint(o.SinkNaive),
	})
	if _, err := start("sink", "sink", sinkEnv); err != nil {
		return nil, err
	}
	dEnv := harness.Merge(pprof, map[string]string{"NOTIFLOW_ORDERING": o.Ordering, "NOTIFLOW_SIM_LATENCY": o.SimLatency.String()})
	if o.Workers > 0 {
		dEnv["NOTIFLOW_WORKERS"] = fmt.Sprint(o.Workers)
	}
	for i := 1; i <= o.Dispatchers; i++ {
		if _, err := start(fmt.Sprintf("dispatcher-%d", i), "dispatcher", dEnv); err != nil {
			return nil, err
		}
	}
	return start("scheduler", "scheduler", pprof)
}

// follow polls the run every second, printing progress (and what extra
// returns, when not nil), until it finishes.
func follow(ctx context.Context, admin *harness.Admin, id string, timeout time.Duration, extra func(context.Context) string) (*harness.Run, error) {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		run, err := admin.Benchmark(ctx, id)
		if err != nil {
			return nil, err
		}
		p := run.Progress
		more := ""
		if extra != nil {
			more = extra(ctx)
		}
		fmt.Printf("  %-8s targets %7d  outbox %7d  published %7d  dispatched %7d  persisted %7d%s\n",
			run.Status, p.TargetsCreated, p.OutboxRows, p.Published, p.Dispatched, p.Persisted, more)
		if run.Finished() {
			return run, nil
		}
		if time.Now().After(deadline) {
			return run, fmt.Errorf("run %s not finished within %s", id, timeout)
		}
	}
}

func printReport(title string, res *result) {
	r := res.Run.Report
	fmt.Printf("\n== %s (run %s)\n", title, res.Run.ID)
	b, _ := json.MarshalIndent(struct {
		*benchreport.Report
		Series json.RawMessage `json:"series,omitempty"`
	}{Report: r}, "", "  ")
	fmt.Println(string(b))
	if len(res.RSSMiB) > 0 {
		fmt.Printf("peak RSS MiB: %v\n", res.RSSMiB)
	}
	if len(res.CPUSec) > 0 {
		fmt.Printf("CPU seconds during the run (setup included): %v\n", res.CPUSec)
	}
	if c := res.Cost; c != nil {
		fmt.Printf("run window %.2fs; CPU-us per notification: %s\n", c.RunWindowSec, harness.FormatByProcess(c.CPUMicrosPerNotification))
		if len(c.MariaDBRowsPerNotification) > 0 {
			fmt.Printf("MariaDB rows per notification: %s\n", harness.FormatByProcess(c.MariaDBRowsPerNotification))
		}
		for _, name := range slices.Sorted(maps.Keys(c.JITShare)) {
			if share := c.JITShare[name]; share > harness.ColdJIT {
				fmt.Printf("warning: %s's JIT compiler used %.0f%% of its CPU in the run window: it is still warming up and its figure overstates its cost (bench/README.md); compare only runs on a warm %s\n", name, share*100, name)
			}
		}
	}
	if res.Receiver != nil {
		fmt.Println(res.Receiver)
	}
	if res.Floor != nil {
		fmt.Printf("floor (rows in %s order): %d notifications in %.2fs = %.0f/s; floorRatio %.2f; parts done at (s) %v\n",
			res.Config.FloorOrder, res.Floor.Notifications, res.Floor.Seconds, res.FloorPerSecond, res.FloorRatio, res.Floor.PartSeconds)
		if len(res.Floor.CPUMicrosPerNotification) > 0 {
			fmt.Printf("floor CPU-us per notification: %s\n", harness.FormatByProcess(res.Floor.CPUMicrosPerNotification))
		}
	}
	fmt.Println(benchmarkLine(res.Run))
}

// benchmarkLine is the one-line summary in the field's familiar form.
func benchmarkLine(run *harness.Run) string {
	r := run.Report
	return fmt.Sprintf("[NOTIFLOW BENCHMARK] eligible=%d outboxCreated=%d eventPublishSec=%.3f totalSec=%.3f msgsPerSecond=%.0f lost=%d duplicates=%d",
		r.Eligible, r.OutboxCreated, r.EventPublishSec, r.TotalSec, r.MsgsPerSecond, r.Lost, r.Duplicates)
}

// outPath is where a report named on the command line goes: an absolute
// path as given, a relative one under the repository root (the default
// names bench/results/...).
func outPath(root, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(root, p)
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	fmt.Printf("wrote %s\n", strings.TrimPrefix(path, mustWd()+"/"))
	return nil
}

func mustWd() string {
	wd, _ := os.Getwd()
	return wd
}

// runStack returns a stack for the run iso names, with a fresh API token
// in its base env and its logs under bench/results/logs/<run>.
func runStack(root, binDir string, iso harness.Isolation, deps harness.Deps, partitions int) (*harness.Stack, string, error) {
	token := randomToken()
	base, err := iso.Env(deps, partitions, token)
	if err != nil {
		return nil, "", err
	}
	stack, err := harness.NewStack(binDir, filepath.Join(root, "bench", "results", "logs", iso.Name), base)
	if err != nil {
		return nil, "", err
	}
	return stack, token, nil
}

func randomToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

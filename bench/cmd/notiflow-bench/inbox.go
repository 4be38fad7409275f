package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/notiflow/notiflow/bench/harness"
	"github.com/notiflow/notiflow/bench/inbox"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/sink/notifications"
)

// inboxIsolation names the inbox benchmark's database and topics. It is
// fixed, not per run, so that the seeded table is reused by the next run.
const inboxIsolation = "inboxbench"

// inboxOptions are the knobs of make bench-inbox.
type inboxOptions struct {
	Rows        int           `json:"rows"`
	HeavyItems  int           `json:"heavyItems"`
	Recipients  int           `json:"recipients"`
	Partitions  int           `json:"partitions"`
	Rate        int           `json:"rate"`
	Duration    time.Duration `json:"duration"`
	Warmup      time.Duration `json:"warmup"`
	Limit       int           `json:"limit"`
	UnreadCount bool          `json:"unreadCount"`
	Reseed      bool          `json:"-"`
	Out         string        `json:"-"`
}

func (o *inboxOptions) register(fs *flag.FlagSet) {
	fs.IntVar(&o.Rows, "rows", 1_000_000, "rows in the notifications table")
	fs.IntVar(&o.HeavyItems, "heavy", 100_000, "inbox items of the recipient whose inbox is read")
	fs.IntVar(&o.Recipients, "recipients", 10_000, "other recipients the remaining rows are spread over")
	fs.IntVar(&o.Partitions, "partitions", 12, "partitions of the results topic")
	fs.IntVar(&o.Rate, "rate", 1000, "requests per second")
	fs.DurationVar(&o.Duration, "duration", 30*time.Second, "measured load: rate × duration requests (it lasts longer on a machine too busy to keep the pace)")
	fs.DurationVar(&o.Warmup, "warmup", 5*time.Second, "unmeasured load at the same rate first")
	fs.IntVar(&o.Limit, "limit", 20, "page size of the first-page request")
	fs.BoolVar(&o.UnreadCount, "unread-count", false, "also measure GET .../inbox/unread_count (a second load)")
	fs.BoolVar(&o.Reseed, "reseed", false, "drop the seeded table and seed it again")
	fs.StringVar(&o.Out, "out", "bench/results/inbox-latest.json", "where to write the report (JSON)")
}

func (o inboxOptions) spec() inbox.Spec {
	return inbox.Spec{Rows: o.Rows, HeavyItems: o.HeavyItems, Recipients: o.Recipients, Spacing: 100 * time.Millisecond}
}

// inboxResult is what make bench-inbox writes.
type inboxResult struct {
	Config      inboxOptions      `json:"config"`
	Seeded      bool              `json:"seededThisRun"`
	SeedSec     float64           `json:"seedSec,omitempty"`
	FirstPage   inbox.LoadResult  `json:"firstPage"`
	UnreadCount *inbox.LoadResult `json:"unreadCount,omitempty"`
	// CPUSec is the CPU time the sink and MariaDB used during the measured
	// load(s), and CPUShare the same divided by the load's length (1.0 =
	// one core busy).
	CPUSec   map[string]float64 `json:"cpuSec"`
	CPUShare map[string]float64 `json:"cpuShare"`
	// MachineBusyCores is the whole machine's busy CPU during the load
	// (every process, this tool and other users included), in cores.
	MachineBusyCores float64 `json:"machineBusyCores"`
	// LoadAvg is /proc/loadavg at the end of the first-page load.
	LoadAvg string `json:"loadAvg"`
}

func cmdInbox(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("inbox", flag.ContinueOnError)
	var o inboxOptions
	o.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := o.spec().Validate(); err != nil {
		return err
	}
	if o.Rate < 1 || o.Duration <= 0 || o.Limit < 1 {
		return errors.New("rate, duration and limit must be positive")
	}
	root, err := harness.Root()
	if err != nil {
		return err
	}
	res, err := inboxBenchmark(ctx, root, o)
	if res == nil {
		return err
	}
	// A load with failed requests is reported too, then exits non-zero.
	printLoad("first page", res.FirstPage)
	if res.UnreadCount != nil {
		printLoad("unread count", *res.UnreadCount)
	}
	fmt.Printf("CPU during the load (cores): %v; whole machine busy: %.2f cores\n", res.CPUShare, res.MachineBusyCores)
	return errors.Join(writeJSON(outPath(root, o.Out), res), err)
}

// inboxBenchmark seeds the table unless a previous run did, starts a sink
// on it and loads the sink's inbox routes.
func inboxBenchmark(ctx context.Context, root string, o inboxOptions) (*inboxResult, error) {
	if err := harness.DepsUp(ctx, root); err != nil {
		return nil, err
	}
	fmt.Println("building the sink")
	binDir := filepath.Join(root, "bin")
	if err := harness.Build(ctx, root, binDir, "sink"); err != nil {
		return nil, err
	}
	deps := harness.LocalDeps()
	iso := harness.NewIsolation(inboxIsolation)
	runs, db, err := openRuns(ctx, deps, iso)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	res := &inboxResult{Config: o}
	span := notifications.Span{FromTarget: 1, ToTarget: uint64(o.Rows)}
	n, err := runs.Count(ctx, span)
	if err != nil {
		return nil, err
	}
	if o.Reseed || n != int64(o.Rows) {
		fmt.Printf("seeding %d rows (%d in %s's inbox); found %d\n", o.Rows, o.HeavyItems, inbox.HeavyRecipient, n)
		if err := iso.Create(ctx, deps); err != nil {
			return nil, err
		}
		// The topic is kept: records of an interrupted seeding that the
		// sink still consumes are the same rows, which its upsert absorbs.
		res.Seeded = true
	} else {
		fmt.Printf("reusing the %d seeded rows of database %s (-reseed to seed again)\n", n, iso.Database)
	}
	stack, token, err := runStack(root, binDir, iso, deps, o.Partitions)
	if err != nil {
		return nil, err
	}
	defer stack.StopAll(30 * time.Second)
	sink, err := stack.Start(ctx, "sink", "sink", harness.Merge(iso.ServiceEnv("sink"), map[string]string{"NOTIFLOW_BATCH_SIZE": "500"}))
	if err != nil {
		return nil, err
	}
	if res.Seeded {
		start := time.Now()
		if err := seed(ctx, deps, iso, o.spec(), runs, span); err != nil {
			return nil, err
		}
		res.SeedSec = time.Since(start).Seconds()
	}
	apiBase := "http://" + sink.Addr + "/v1/recipients/" + url.PathEscape(inbox.HeavyRecipient) + "/inbox"
	page := inbox.LoadSpec{URL: fmt.Sprintf("%s?unread=true&limit=%d", apiBase, o.Limit), Token: token, Rate: o.Rate}
	if o.Warmup > 0 {
		fmt.Printf("warm-up: %s at %d/s\n", o.Warmup, o.Rate)
		page.For = o.Warmup
		if _, err := inbox.Load(ctx, page); err != nil {
			return nil, err
		}
	}
	pids := testkit.DepPids(root)
	meter := harness.StartCPUMeter(map[string]int{"sink": sink.Pid(), "mariadb": pids["mariadb"]})
	busy0, _ := harness.MachineCPUSeconds()
	// The loads may outlast their nominal duration on a busy machine
	// (inbox.Load sends every request, late ones too): the shares below
	// are of the time they took.
	loadStart := time.Now()
	fmt.Printf("load: GET %s at %d/s for %s\n", page.URL, o.Rate, o.Duration)
	page.For = o.Duration
	if res.FirstPage, err = inbox.Load(ctx, page); err != nil {
		return nil, err
	}
	res.LoadAvg = loadAvg()
	if o.UnreadCount {
		count := inbox.LoadSpec{URL: apiBase + "/unread_count", Token: token, Rate: o.Rate, For: o.Duration}
		fmt.Printf("load: GET %s at %d/s for %s\n", count.URL, o.Rate, o.Duration)
		r, err := inbox.Load(ctx, count)
		if err != nil {
			return nil, err
		}
		res.UnreadCount = &r
	}
	res.CPUSec = meter.Stop()
	loaded := time.Since(loadStart)
	if busy1, _ := harness.MachineCPUSeconds(); busy0 >= 0 && busy1 >= 0 {
		res.MachineBusyCores = float64(int((busy1-busy0)/loaded.Seconds()*100)) / 100
	}
	res.CPUShare = map[string]float64{}
	for k, v := range res.CPUSec {
		res.CPUShare[k] = float64(int(v/loaded.Seconds()*100)) / 100
	}
	if res.FirstPage.Success < 1 {
		return res, fmt.Errorf("first page: %.2f%% of the requests succeeded (%v %v); sink log: %s",
			res.FirstPage.Success*100, res.FirstPage.Codes, res.FirstPage.Errors, sink.LogPath)
	}
	return res, nil
}

// openRuns opens the benchmark's database (creating it when missing, so
// that a first run counts zero rows) and the notifications package's reader
// of it.
func openRuns(ctx context.Context, deps harness.Deps, iso harness.Isolation) (*notifications.Runs, *sql.DB, error) {
	server, err := sql.Open("mysql", deps.MySQLDSN)
	if err != nil {
		return nil, nil, fmt.Errorf("open mysql: %w", err)
	}
	defer server.Close()
	if _, err := server.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+iso.Database+"`"); err != nil {
		return nil, nil, fmt.Errorf("create database %s: %w", iso.Database, err)
	}
	dsn, err := iso.DSN(deps)
	if err != nil {
		return nil, nil, err
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", iso.Database, err)
	}
	return notifications.NewRuns(db), db, nil
}

// seed produces the spec's records to the sink's results topic and waits
// until the sink has persisted all of them.
func seed(ctx context.Context, deps harness.Deps, iso harness.Isolation, s inbox.Spec, runs *notifications.Runs, span notifications.Span) error {
	start := time.Now()
	err := inbox.Produce(ctx, strings.Split(deps.Kafka, ","), iso.TopicDispatched, s, func(done int) {
		if done%200_000 == 0 || done == s.Rows {
			fmt.Printf("  produced %7d records (%.0fs)\n", done, time.Since(start).Seconds())
		}
	})
	if err != nil {
		return err
	}
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		n, err := runs.Count(ctx, span)
		if err != nil {
			return err
		}
		fmt.Printf("  persisted %7d rows (%.0fs)\n", n, time.Since(start).Seconds())
		if n >= int64(s.Rows) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// loadAvg returns the 1, 5 and 15 minute load averages, or "".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func printLoad(name string, r inbox.LoadResult) {
	fmt.Printf("\n== %s: GET %s\n", name, r.URL)
	fmt.Printf("requests %d at %.0f/s (target %d/s), success %.2f%%, codes %v\n", r.Requests, r.Rate, r.TargetRPS, r.Success*100, r.Codes)
	fmt.Printf("latency ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f  mean %.2f\n",
		r.LatencyMs.P50, r.LatencyMs.P90, r.LatencyMs.P99, r.LatencyMs.Max, r.LatencyMs.Mean)
	if len(r.Errors) > 0 {
		fmt.Printf("errors: %v\n", r.Errors)
	}
}

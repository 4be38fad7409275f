package ports_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
	"github.com/notiflow/notiflow/services/scheduler/internal/dlq"
	dlqadapters "github.com/notiflow/notiflow/services/scheduler/internal/dlq/adapters"
	dlqports "github.com/notiflow/notiflow/services/scheduler/internal/dlq/ports"
)

// browser returns a chromedp context on a headless Chromium of the test's
// own, ending with the test or after timeout.
func browser(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("%s is missing (%v): install it with `make test-tools` (apt-get install -y chromium)", chromiumPath, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromiumPath), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() { cancelT(); cancel(); cancelAlloc() })
	return ctx
}

// run runs actions in the browser, failing the test with the page's text
// on error.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v\npage text:\n%s", what, err, text(t, ctx, "body"))
	}
}

// text returns the text of the element sel (a CSS selector).
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func setValue(sel, v string) chromedp.Action[chromedp.Void] {
	return chromedp.SetValue(chromedp.CSS(sel), v)
}
func click(sel string) chromedp.Action[chromedp.Void] { return chromedp.Click(chromedp.CSS(sel)) }

// waitText waits until the element sel's text contains want.
func waitText(sel, want string) chromedp.Action[chromedp.Void] {
	return waitJS(fmt.Sprintf(`(document.querySelector(%q) || {}).textContent?.includes(%q)`, sel, want))
}

// waitJS waits until the JavaScript expression is truthy.
func waitJS(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(60*time.Second))
}

// TestAdminPageStartsBenchmark fills the benchmark form in headless
// Chromium: parameters the server refuses show its message naming the
// field; accepted ones start a run with exactly those parameters, whose
// progress the page follows until the run is done.
func TestAdminPageStartsBenchmark(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{lead: time.Second, sample: 50 * time.Millisecond})
	e.startScheduler(t)
	e.simulate(t, faults{})
	ctx := browser(t, 90*time.Second)

	run(t, ctx, "load the page", chromedp.Navigate(e.url+"/admin/#token="+token), waitText("#message", "no benchmark runs yet"))
	run(t, ctx, "bad parameters",
		setValue("#bench-notifications", "100"),
		setValue("#bench-recipients", "500"),
		click("#bench-start"),
		waitText("#bench-message", "recipients: must be between 1 and notifications (100), got 500"))
	run(t, ctx, "bad latency",
		setValue("#bench-recipients", "10"),
		setValue("#bench-latency", "-1"),
		click("#bench-start"),
		waitText("#bench-message", "sim_latency_ms: must be between 0"))
	if runs := e.list(t); len(runs) != 0 {
		t.Fatalf("refused parameters created %d run(s)", len(runs))
	}
	run(t, ctx, "start a run and follow it",
		setValue("#bench-latency", "1"),
		setValue("#bench-channel", "sim"),
		click("#bench-start"),
		waitText("#bench-message", "started"),
		waitText("#run-status", "done"))
	progress := text(t, ctx, "#progress")
	runs := e.list(t)
	if len(runs) != 1 {
		t.Fatalf("%d runs, want 1", len(runs))
	}
	p := runs[0].Params
	if p.Notifications != 100 || p.Recipients != 10 || p.Channel != domain.ChannelSim || p.SimLatencyMs == nil || *p.SimLatencyMs != 1 {
		t.Errorf("the run's params %+v, want 100 notifications, 10 recipients, sim, 1 ms", p)
	}
	if !strings.Contains(progress, "persisted100") {
		t.Errorf("progress shown %q, want persisted 100", progress)
	}
}

// TestAdminPageDLQRedrive shows the dead letters of a window in headless
// Chromium, filtered by source, and redrives them from the page: the
// button first shows the dry run's plan (nothing is produced yet), and
// only the confirmation produces the records back to their topic. The
// page's first load (every source) answers after the filtered one and is
// not shown over it.
func TestAdminPageDLQRedrive(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	rdb, prefix := testkit.Redis(t)
	dlqTopic, dueTopic := testkit.Topic(t, brokers, 1), testkit.Topic(t, brokers, 1)
	w := kafkax.NewWriter(brokers, kafkax.WriterOptions{})
	t.Cleanup(func() { _ = w.Close() })
	svc := dlq.NewService(dlqTopic, dlqadapters.NewTopicLog(brokers, dlqTopic),
		dlqadapters.NewMarks(rdb, prefix, dlqTopic, time.Hour), w, dlq.Options{MaxRedrives: 3, RedriveMax: 100}, testLogger(t))
	// The page loads the last hour of every source when it opens; that
	// answer is held until the page shows the filtered one, so it arrives
	// late, as a slow server's would, and must not replace it.
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseHeld := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseHeld)
	e := newEnv(t, envOpts{lead: time.Hour, routes: func(mux *http.ServeMux) {
		inner := http.NewServeMux()
		dlqports.NewHandler(svc, token, testLogger(t)).Register(inner)
		mux.HandleFunc("GET /admin/dlq", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("source") == "" {
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}
			inner.ServeHTTP(w, r)
		})
		mux.Handle("POST /admin/dlq/redrive", inner)
	}})
	dead := kafkax.NewDeadLetter(w, dlqTopic, "dispatcher")
	sinkDead := kafkax.NewDeadLetter(w, dlqTopic, "sink")
	send := func(d *kafkax.DeadLetter, key string) {
		m := kafka.Message{Topic: dueTopic, Key: []byte(key), Value: []byte("v-" + key), Headers: kafkax.ContractHeaders("")}
		if err := d.Send(context.Background(), m, errors.New("webhook 503 for "+key), 4); err != nil {
			t.Fatal(err)
		}
	}
	send(dead, "early")
	from := time.Now().UTC().Truncate(time.Millisecond).Add(time.Millisecond)
	testkit.Eventually(t, time.Second, func() error {
		if time.Now().Before(from) {
			return testkit.Errorf("not yet")
		}
		return nil
	})
	send(dead, "page-1")
	send(dead, "page-2")
	send(sinkDead, "sink-1")
	to := time.Now().UTC().Add(time.Minute)

	ctx := browser(t, 60*time.Second)
	run(t, ctx, "show the window",
		chromedp.Navigate(e.url+"/admin/#token="+token),
		chromedp.WaitVisible(chromedp.CSS("#dlq-form")),
		setValue("#dlq-from", from.Format(time.RFC3339Nano)),
		setValue("#dlq-to", to.Format(time.RFC3339Nano)),
		setValue("#dlq-source", "dispatcher"),
		click("#dlq-show"),
		// The page first showed the last hour of every source: wait for
		// the filtered answer.
		waitJS(`(t => t.includes("page-2") && !t.includes("sink-1"))(document.querySelector("#dlq-table tbody").textContent)`))
	releaseHeld()
	run(t, ctx, "the held answer of every source",
		waitJS(`document.querySelector("#dlq-table").getAttribute("aria-busy") === "false"`))
	rows := text(t, ctx, "#dlq-table tbody")
	if strings.Contains(rows, "early") || strings.Contains(rows, "sink-1") || !strings.Contains(rows, "page-1") ||
		!strings.Contains(rows, "webhook 503 for page-1") {
		t.Errorf("DLQ table of the window, source dispatcher:\n%s", rows)
	}
	run(t, ctx, "dry run",
		click("#dlq-redrive"),
		waitText("#dlq-plan-summary", "2 would be redriven, 0 skipped"))
	plan := text(t, ctx, "#dlq-plan-table tbody")
	if strings.Count(plan, "would be redriven") != 2 || !strings.Contains(plan, "page-1") || !strings.Contains(plan, "page-2") {
		t.Errorf("plan:\n%s", plan)
	}
	if n := countRecords(t, brokers, dueTopic); n != 0 {
		t.Fatalf("the dry run produced %d record(s)", n)
	}
	run(t, ctx, "confirm",
		click("#dlq-confirm"),
		waitText("#dlq-result", "redriven 2, skipped 0"),
		waitJS(`[...document.querySelectorAll("#dlq-table tbody tr")].every(tr => tr.cells[9].textContent === "yes")`))
	if n := countRecords(t, brokers, dueTopic); n != 2 {
		t.Fatalf("the redrive produced %d record(s), want 2", n)
	}
	run(t, ctx, "second dry run",
		click("#dlq-redrive"),
		waitText("#dlq-plan-summary", "0 would be redriven, 2 skipped"),
		waitText("#dlq-plan-table", "already redriven"))
}

// countRecords is the number of records in partition 0 of topic.
func countRecords(t *testing.T, brokers []string, topic string) int64 {
	t.Helper()
	conn, err := kafka.DialLeader(context.Background(), "tcp", brokers[0], topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	first, last, err := conn.ReadOffsets()
	if err != nil {
		t.Fatal(err)
	}
	return last - first
}

// list returns the env's runs (GET /admin/benchmarks).
func (e *env) list(t *testing.T) []domain.Run {
	t.Helper()
	r := e.do(t, http.MethodGet, "/admin/benchmarks", bearer, "")
	if r.code != http.StatusOK {
		t.Fatalf("GET /admin/benchmarks: %d %s", r.code, r.body)
	}
	var out struct {
		Runs []domain.Run `json:"runs"`
	}
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatal(err)
	}
	return out.Runs
}

package ports_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
)

// chromiumPath is Debian's chromium; `make test-tools` installs it.
const chromiumPath = "/usr/bin/chromium"

// finishedRun stores a done run with a report computed from known data:
// 6 seconds of rows and 10 lag samples per group.
func finishedRun(t *testing.T, e *env) domain.Run {
	t.Helper()
	ctx := context.Background()
	store := adapters.NewStore(e.db.DB())
	due := time.Now().UTC().Add(-time.Minute).Truncate(time.Microsecond)
	run := domain.Run{ID: "55555555-5555-4555-8555-555555555555", Status: domain.StatusCreating, CreatedAt: due.Add(-5 * time.Second), DueAt: due,
		Params: domain.Params{Notifications: 600, Recipients: 60, Channel: "sim"}}
	if err := store.InsertRun(ctx, run, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.MarkWaiting(ctx, run.ID, domain.TargetRange{RunID: run.ID, MinID: 1, MaxID: 600, Exclusive: true}, 600, due, 0.05); err != nil {
		t.Fatal(err)
	}
	in := domain.ReportInput{DueAt: due, Eligible: 600, OutboxCreated: 600, LastOutboxAt: due.Add(200 * time.Millisecond),
		PublishedAt: due.Add(300 * time.Millisecond), Groups: []string{e.dispatcherGroup, e.sinkGroup}}
	for i := 0; i < 600; i++ {
		at := due.Add(time.Duration(i) * 10 * time.Millisecond)
		in.Rows = append(in.Rows, domain.Row{Occurrence: domain.Occurrence{TargetID: uint64(i + 1), OccurrenceUS: due.UnixMicro()},
			DueAt: due, DispatchedAt: at, PersistedAt: at.Add(5 * time.Millisecond)})
	}
	for i := 0; i < 10; i++ {
		in.Lag = append(in.Lag, domain.LagSample{At: due.Add(time.Duration(i) * 600 * time.Millisecond),
			Lag: map[string]int64{e.dispatcherGroup: int64(600 - 60*i), e.sinkGroup: int64(30 * (i % 3))}})
	}
	rep := domain.ComputeReport(in)
	p := domain.Progress{TargetsCreated: 600, OutboxRows: 600, Published: 600, Dispatched: 600, Persisted: 600}
	if ok, err := store.Finish(ctx, run.ID, domain.StatusDone, p, &rep, "", time.Now()); err != nil || !ok {
		t.Fatalf("finish: %v %v", ok, err)
	}
	return e.get(t, run.ID)
}

// TestAdminPageRendersTheChart loads the admin page in headless Chromium
// with the token and the run in the URL fragment and checks that the
// dumped DOM holds the server-rendered chart of the finished run.
func TestAdminPageRendersTheChart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{lead: time.Hour})
	run := finishedRun(t, e)
	page := fmt.Sprintf("%s/admin/#token=%s&run=%s", e.url, token, run.ID)

	dom := dumpDOM(t, page)
	if dir := os.Getenv("NOTIFLOW_TEST_DUMP"); dir != "" {
		_ = os.WriteFile(dir+"/admin-dom.html", []byte(dom), 0o644)
	}
	chart := regexp.MustCompile(`(?s)<div id="chart">(.*?)</div>`).FindStringSubmatch(dom)
	if chart == nil || !strings.Contains(chart[1], "<svg") {
		t.Fatalf("the chart container holds no <svg>; DOM:\n%s", dom)
	}
	svg := chart[1]
	if n, want := strings.Count(svg, `class="persisted-bar"`), len(run.Report.Series.PersistedPerSecond); n != want || want < 6 {
		t.Errorf("%d persisted bars in the page, want %d", n, want)
	}
	for _, g := range []string{e.dispatcherGroup, e.sinkGroup} {
		if !strings.Contains(svg, `class="lag-line" data-group="`+g+`"`) {
			t.Errorf("no lag line for %s", g)
		}
	}
	for _, want := range []string{"rows persisted per second", "consumer lag", "seconds since the due time"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	// The runs table and the report summary were filled from the API, and
	// the token left the address bar for sessionStorage.
	if !strings.Contains(dom, run.ID[:8]) || !strings.Contains(dom, `"msgsPerSecond"`) {
		t.Errorf("runs table or report missing; DOM:\n%s", dom)
	}
	if strings.Contains(dom, token) {
		t.Errorf("the token appears in the DOM")
	}
}

// dumpDOM loads page in headless Chromium, lets its scripts run (5 s of
// virtual time) and returns the DOM.
func dumpDOM(t *testing.T, page string) string {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("%s is missing (%v): install it with `make test-tools` (apt-get install -y chromium)", chromiumPath, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromiumPath, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=5000", "--dump-dom", page)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("chromium: %v\n%s", err, stderr)
	}
	return string(out)
}

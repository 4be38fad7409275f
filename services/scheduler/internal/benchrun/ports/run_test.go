package ports_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/simsend"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
)

// TestRunEndToEnd drives a 300-notification run through the admin API, the
// real scheduler components (claim, outbox, relay to Kafka) and a simulated
// dispatcher and sink that consume and commit in their consumer groups.
func TestRunEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{lead: time.Second, sample: 50 * time.Millisecond})
	e.startScheduler(t)
	e.simulate(t, faults{})
	ctx := context.Background()

	run := e.start(t, `{"notifications":300,"recipients":30,"channel":"sim","sim_latency_ms":1}`)
	run = e.wait(t, run.ID, 60*time.Second)
	if run.Status != domain.StatusDone || run.Error != "" {
		t.Fatalf("run ended %s: %s (progress %+v)", run.Status, run.Error, run.Progress)
	}
	if want := (domain.Progress{TargetsCreated: 300, OutboxRows: 300, Published: 300, Dispatched: 300, Persisted: 300}); run.Progress != want {
		t.Errorf("progress = %+v, want %+v", run.Progress, want)
	}
	r := run.Report
	if r == nil || r.Series == nil {
		t.Fatalf("no report: %+v", run)
	}
	if r.Eligible != 300 || r.OutboxCreated != 300 || r.Lost != 0 || r.Duplicates != 0 || r.DuplicatesSent != 0 || r.DuplicatesPersisted != 0 {
		t.Errorf("report counts = %+v", r)
	}
	if r.TotalSec <= 0 || r.EventPublishSec <= 0 || r.EventPublishSec > r.TotalSec {
		t.Errorf("totalSec %v, eventPublishSec %v", r.TotalSec, r.EventPublishSec)
	}
	if want := 300 / r.TotalSec; r.MsgsPerSecond < want*0.99 || r.MsgsPerSecond > want*1.01 {
		t.Errorf("msgsPerSecond %v, want 300 / %v", r.MsgsPerSecond, r.TotalSec)
	}
	if p := r.LatencyMs; p.P50 <= 0 || p.P95 < p.P50 || p.P99 < p.P95 || p.P99 > r.TotalSec*1000+1 {
		t.Errorf("latency = %+v (totalSec %v)", p, r.TotalSec)
	}
	for _, stage := range []string{domain.StageClaim, domain.StagePublish, domain.StageDispatch, domain.StagePersist} {
		if r.StagesPerSecond[stage] <= 0 {
			t.Errorf("stage %s = %v", stage, r.StagesPerSecond[stage])
		}
	}
	// Rows are claimed before they are published: the claim stage ends by
	// the publish stage's end (give or take one 50 ms sample).
	if claimSec := 300 / r.StagesPerSecond[domain.StageClaim]; claimSec > r.EventPublishSec+0.06 {
		t.Errorf("claim stage ends at %.3f s, after publishing ended (%.3f s)", claimSec, r.EventPublishSec)
	}
	if _, ok := r.PeakLag[e.dispatcherGroup]; !ok || len(r.PeakLag) != 2 {
		t.Errorf("peak lag = %v, want both groups", r.PeakLag)
	}
	var sum int64
	for _, n := range r.Series.PersistedPerSecond {
		sum += n
	}
	if sum != 300 || len(r.Series.Lag) == 0 {
		t.Errorf("series: %d rows per second in all, %d lag points", sum, len(r.Series.Lag))
	}
	if run.SetupSec <= 0 || !run.DueAt.Equal(run.CreatedAt.Add(time.Second)) {
		t.Errorf("setupSec %v, dueAt %s (created %s)", run.SetupSec, run.DueAt, run.CreatedAt)
	}

	// The report JSON has the client's field names.
	raw := e.do(t, http.MethodGet, "/admin/benchmarks/"+run.ID, bearer, "")
	t.Logf("run: %s", raw.body)
	for _, field := range []string{`"eligible"`, `"outboxCreated"`, `"eventPublishSec"`, `"totalSec"`, `"msgsPerSecond"`, `"latencyMs":{"p50"`,
		`"stagesPerSecond"`, `"peakLag"`, `"lost"`, `"duplicates"`, `"duplicatesSent"`, `"duplicatesPersisted"`, `"persistedPerSecond"`, `"lag":[{"t"`,
		`"targetsCreated"`, `"setupSec"`, `"dueAt"`, `"createdAt"`} {
		if !strings.Contains(string(raw.body), field) {
			t.Errorf("GET answer lacks %s: %s", field, raw.body)
		}
	}
	// The list carries the report without the series.
	var list struct{ Runs []json.RawMessage }
	if r := e.do(t, http.MethodGet, "/admin/benchmarks", bearer, ""); json.Unmarshal(r.body, &list) != nil || len(list.Runs) != 1 ||
		!strings.Contains(string(list.Runs[0]), `"msgsPerSecond"`) || strings.Contains(string(list.Runs[0]), "persistedPerSecond") {
		t.Errorf("list = %s", r.body)
	}
	// The chart.
	svg := e.do(t, http.MethodGet, "/admin/benchmarks/"+run.ID+"/chart.svg", bearer, "")
	if svg.code != 200 || svg.header.Get("Content-Type") != "image/svg+xml" || !strings.Contains(string(svg.body), `class="persisted-bar"`) ||
		!strings.Contains(string(svg.body), `class="lag-line" data-group="`+e.dispatcherGroup+`"`) {
		t.Errorf("chart: %d %s %.300s", svg.code, svg.header.Get("Content-Type"), svg.body)
	}

	// DELETE of a finished run keeps its report and removes its rows.
	del := e.do(t, http.MethodDelete, "/admin/benchmarks/"+run.ID, bearer, "")
	var after domain.Run
	if json.Unmarshal(del.body, &after) != nil || del.code != 200 || after.Status != domain.StatusDone || after.Report == nil {
		t.Fatalf("DELETE finished run: %d %s", del.code, del.body)
	}
	var targets, notes int64
	_ = e.db.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM notification_targets WHERE run_id = ?`, run.ID).Scan(&targets)
	_ = e.db.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM notifications WHERE run_id = ?`, run.ID).Scan(&notes)
	if n, _ := e.rdb.Exists(ctx, simsend.Key(e.prefix, run.ID)).Result(); targets != 0 || notes != 0 || n != 0 {
		t.Fatalf("after DELETE: %d targets, %d notifications, sends hash exists %d", targets, notes, n)
	}
}

// TestRunReportsLostAndDuplicates makes the simulated pipeline send one
// occurrence twice and lose another: the run must not be done; it times
// out with a report that shows both. (A second persisted row for one
// occurrence cannot happen: the notifications primary key is the
// occurrence.)
func TestRunReportsLostAndDuplicates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{lead: 500 * time.Millisecond, stall: 2 * time.Second})
	e.startScheduler(t)
	e.simulate(t, faults{sendTwice: map[int]bool{5: true}, drop: map[int]bool{20: true}})

	run := e.start(t, `{"notifications":100,"recipients":7,"channel":"sim","sim_latency_ms":0}`)
	run = e.wait(t, run.ID, 60*time.Second)
	if run.Status != domain.StatusFailed || !strings.Contains(run.Error, "timeout: no progress for 2s") {
		t.Fatalf("run ended %s: %q", run.Status, run.Error)
	}
	r := run.Report
	if r == nil {
		t.Fatal("a timed-out run must still have a report")
	}
	if r.Lost != 1 || r.DuplicatesSent != 1 || r.DuplicatesPersisted != 0 || r.Duplicates != 1 || r.Eligible != 100 || r.OutboxCreated != 100 {
		t.Fatalf("report: lost %d, duplicates sent %d, persisted %d, total %d, eligible %d, outbox %d",
			r.Lost, r.DuplicatesSent, r.DuplicatesPersisted, r.Duplicates, r.Eligible, r.OutboxCreated)
	}
	if run.Progress.Persisted != 99 || run.Progress.Dispatched != 100 {
		t.Fatalf("progress = %+v: 99 rows (one missing) and 100 distinct sends", run.Progress)
	}
}

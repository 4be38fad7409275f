package ports_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
)

func TestStartRefusesBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{lead: time.Hour, max: 1000})
	tests := []struct {
		name     string
		give     string
		wantCode int
		wantMsg  string
	}{
		{"unknown field", `{"notifications":10,"recipients":1,"channel":"sim","burst":true}`, 400, `unknown field "burst"`},
		{"zero notifications", `{"notifications":0,"recipients":1,"channel":"sim"}`, 400, "notifications: must be between 1 and 1000, got 0"},
		{"over the configured maximum", `{"notifications":1001,"recipients":1,"channel":"sim"}`, 400, "notifications: must be between 1 and 1000"},
		{"more recipients than notifications", `{"notifications":10,"recipients":11,"channel":"sim"}`, 400, "recipients: must be between 1 and notifications (10), got 11"},
		{"no recipients", `{"notifications":10,"channel":"sim"}`, 400, "recipients:"},
		{"webhook channel without url", `{"notifications":10,"recipients":1,"channel":"webhook"}`, 400, "webhook_url: is required for channel webhook"},
		{"unknown channel", `{"notifications":10,"recipients":1,"channel":"sms"}`, 400, `channel: must be sim, inbox or webhook, got "sms"`},
		{"webhook to loopback", `{"notifications":10,"recipients":1,"channel":"webhook","webhook_url":"http://127.0.0.1:9/hook"}`, 400, "webhook_url: 127.0.0.1 is a loopback address, refused for webhooks"},
		{"webhook url not absolute", `{"notifications":10,"recipients":1,"channel":"webhook","webhook_url":"/hook"}`, 400, "webhook_url: must be an absolute http or https URL"},
		{"webhook secret not whsec", `{"notifications":10,"recipients":1,"channel":"webhook","webhook_url":"http://127.0.0.1:9/hook","webhook_secret":"hunter2"}`, 400, "webhook_secret: not a webhook secret"},
		{"no channel", `{"notifications":10,"recipients":1}`, 400, "channel: is required"},
		{"negative latency", `{"notifications":10,"recipients":1,"channel":"sim","sim_latency_ms":-1}`, 400, "sim_latency_ms: must be between 0 and 10000, got -1"},
		{"latency too high", `{"notifications":10,"recipients":1,"channel":"sim","sim_latency_ms":10001}`, 400, "sim_latency_ms: must be between 0 and 10000"},
		{"webhook url", `{"notifications":10,"recipients":1,"channel":"sim","webhook_url":"http://127.0.0.1/"}`, 400, "webhook_url: applies to channel webhook only"},
		{"string count", `{"notifications":"10","recipients":1,"channel":"sim"}`, 400, "notifications: must be an integer"},
		{"fractional count", `{"notifications":1.5,"recipients":1,"channel":"sim"}`, 400, "notifications: must be an integer"},
		{"malformed", `{"notifications":`, 400, "malformed JSON"},
		{"empty body", ``, 400, "empty body"},
		{"not an object", `[1]`, 400, "body must be a JSON object"},
		{"trailing data", `{"notifications":10,"recipients":1,"channel":"sim"} {}`, 400, "unexpected data after the object"},
		{"too large", `{"channel":"` + strings.Repeat("x", 5000) + `"}`, 413, "request body exceeds 4096 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(t, http.MethodPost, "/admin/benchmarks", bearer, tt.give)
			if r.code != tt.wantCode || !strings.Contains(r.errMsg(), tt.wantMsg) {
				t.Fatalf("got %d %q, want %d containing %q", r.code, r.errMsg(), tt.wantCode, tt.wantMsg)
			}
		})
	}
	// Nothing was stored.
	if r := e.do(t, http.MethodGet, "/admin/benchmarks", bearer, ""); r.code != 200 || string(r.body) != "{\"runs\":[]}\n" {
		t.Fatalf("list after refusals: %d %s", r.code, r.body)
	}
	// Another content type.
	req, _ := http.NewRequest(http.MethodPost, e.url+"/admin/benchmarks", strings.NewReader("notifications=1"))
	req.Header.Set("Authorization", bearer)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("form body: %d, want 415", resp.StatusCode)
	}
}

func TestAdminRoutesNeedTheToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{lead: time.Hour})
	id := "11111111-1111-4111-8111-111111111111"
	routes := []struct{ method, path, body string }{
		{http.MethodPost, "/admin/benchmarks", `{"notifications":1,"recipients":1,"channel":"sim"}`},
		{http.MethodGet, "/admin/benchmarks", ""},
		{http.MethodGet, "/admin/benchmarks/" + id, ""},
		{http.MethodDelete, "/admin/benchmarks/" + id, ""},
		{http.MethodGet, "/admin/benchmarks/" + id + "/chart.svg", ""},
	}
	for _, rt := range routes {
		for _, auth := range []string{"", "Bearer wrong", token, "Basic " + token} {
			r := e.do(t, rt.method, rt.path, auth, rt.body)
			if r.code != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s with %q: %d %s, want 401", rt.method, rt.path, auth, r.code, r.body)
			}
		}
	}
	// The page carries no data: no token needed, and it never embeds one.
	r := e.do(t, http.MethodGet, "/admin/", "", "")
	if r.code != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") ||
		!strings.Contains(r.header.Get("Content-Security-Policy"), "default-src 'none'") || !strings.Contains(string(r.body), "notiflow admin") {
		t.Fatalf("GET /admin/: %d %v", r.code, r.header)
	}
	if r := e.do(t, http.MethodGet, "/admin/benchmarks", bearer, ""); r.code != 200 {
		t.Fatalf("with the token: %d %s", r.code, r.body)
	}
}

func TestOneRunAtATimeAndCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{lead: time.Hour})
	ctx := context.Background()
	first := e.start(t, `{"notifications":250,"recipients":20,"channel":"inbox"}`)
	if first.Status != domain.StatusWaiting || first.Progress.TargetsCreated != 250 || first.SetupSec <= 0 ||
		first.DueAt.Sub(first.CreatedAt) != time.Hour || first.Params.Channel != "inbox" {
		t.Fatalf("first run = %+v", first)
	}
	r := e.do(t, http.MethodPost, "/admin/benchmarks", bearer, `{"notifications":10,"recipients":1,"channel":"sim"}`)
	if r.code != http.StatusConflict || !strings.Contains(r.errMsg(), first.ID) || !strings.Contains(r.errMsg(), "waiting") {
		t.Fatalf("second run: %d %q, want 409 naming %s", r.code, r.errMsg(), first.ID)
	}
	var params string
	if err := e.db.DB().QueryRowContext(ctx, `SELECT MAX(params) FROM notification_targets WHERE run_id = ?`, first.ID).Scan(&params); err != nil || params != "{}" {
		t.Fatalf("inbox params %q, %v", params, err)
	}
	// Unknown and malformed ids.
	for _, p := range []string{"/admin/benchmarks/22222222-2222-4222-8222-222222222222", "/admin/benchmarks/nope"} {
		for _, m := range []string{http.MethodGet, http.MethodDelete} {
			if r := e.do(t, m, p, bearer, ""); r.code != http.StatusNotFound {
				t.Errorf("%s %s: %d, want 404", m, p, r.code)
			}
		}
	}
	// A waiting run has no chart yet.
	if r := e.do(t, http.MethodGet, "/admin/benchmarks/"+first.ID+"/chart.svg", bearer, ""); r.code != http.StatusConflict {
		t.Fatalf("chart of a waiting run: %d, want 409", r.code)
	}
	r = e.do(t, http.MethodDelete, "/admin/benchmarks/"+first.ID, bearer, "")
	var cancelled domain.Run
	_ = json.Unmarshal(r.body, &cancelled)
	if r.code != 200 || cancelled.Status != domain.StatusCancelled || cancelled.FinishedAt == nil {
		t.Fatalf("DELETE: %d %s", r.code, r.body)
	}
	n, err := e.db.CountTargets(ctx, first.ID)
	if err != nil || n != 0 {
		t.Fatalf("%d targets left after cancel (%v)", n, err)
	}
	second := e.start(t, `{"notifications":10,"recipients":1,"channel":"sim","sim_latency_ms":0}`)
	if second.Params.SimLatencyMs == nil || *second.Params.SimLatencyMs != 0 {
		t.Fatalf("second run params = %+v", second.Params)
	}
	if err := e.db.DB().QueryRowContext(ctx, `SELECT MAX(params) FROM notification_targets WHERE run_id = ?`, second.ID).Scan(&params); err != nil || params != `{"_sim_latency_ms":0}` {
		t.Fatalf("sim params %q, %v", params, err)
	}
	var list struct{ Runs []domain.Run }
	if r := e.do(t, http.MethodGet, "/admin/benchmarks", bearer, ""); r.code != 200 || json.Unmarshal(r.body, &list) != nil ||
		len(list.Runs) != 2 || list.Runs[0].ID != second.ID || list.Runs[1].Status != domain.StatusCancelled {
		t.Fatalf("list: %d %s", r.code, r.body)
	}
	if r := e.do(t, http.MethodGet, "/admin/benchmarks?limit=0", bearer, ""); r.code != 400 {
		t.Fatalf("limit=0: %d", r.code)
	}
}

func TestShutdownFailsTheRunAndStartReapsDeadReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{lead: time.Hour})
	run := e.start(t, `{"notifications":5,"recipients":5,"channel":"sim"}`)
	e.stopSvc()
	got := e.get(t, run.ID)
	if got.Status != domain.StatusFailed || !strings.Contains(got.Error, "stopped") {
		t.Fatalf("after shutdown: %s %q", got.Status, got.Error)
	}
	if r := e.do(t, http.MethodPost, "/admin/benchmarks", bearer, `{"notifications":5,"recipients":5,"channel":"sim"}`); r.code != http.StatusServiceUnavailable {
		t.Fatalf("start after shutdown: %d %s, want 503", r.code, r.body)
	}

	// A replica died with a run active (its heartbeat went stale): a
	// replica starting fails it.
	ctx := context.Background()
	store := adapters.NewStore(e.db.DB())
	dead := domain.Run{ID: "33333333-3333-4333-8333-333333333333", Status: domain.StatusCreating, CreatedAt: time.Now().UTC(),
		DueAt: time.Now().UTC(), Params: domain.Params{Notifications: 1, Recipients: 1, Channel: "sim"}}
	if err := store.InsertRun(ctx, dead, "dead-replica"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.DB().ExecContext(ctx, `UPDATE benchmark_runs SET heartbeat_at = UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE WHERE id = ?`, dead.ID); err != nil {
		t.Fatal(err)
	}
	e.runService(t, e.newService(t, "new-replica"))
	testkit.Eventually(t, 10*time.Second, func() error {
		got, err := store.GetRun(ctx, dead.ID)
		if err != nil || got.Run.Status != domain.StatusFailed || !strings.Contains(got.Run.Error, "no heartbeat") {
			return testkit.Errorf("dead replica's run: %+v, %v", got.Run, err)
		}
		return nil
	})
}

func TestPostReapsARunWhoseReplicaDied(t *testing.T) {
	t.Parallel()
	// Reaping only at start and every minute: the POST itself must find
	// the stale run and fail it rather than answer 409.
	e := newEnv(t, envOpts{lead: time.Hour, staleAfter: 2 * time.Second, reapEvery: time.Minute})
	ctx := context.Background()
	store := adapters.NewStore(e.db.DB())
	dead := domain.Run{ID: "44444444-4444-4444-8444-444444444444", Status: domain.StatusRunning, CreatedAt: time.Now().UTC(),
		DueAt: time.Now().UTC(), Params: domain.Params{Notifications: 1, Recipients: 1, Channel: "sim"}}
	if err := store.InsertRun(ctx, dead, "dead-replica"); err != nil {
		t.Fatal(err)
	}
	if r := e.do(t, http.MethodPost, "/admin/benchmarks", bearer, `{"notifications":5,"recipients":5,"channel":"sim"}`); r.code != http.StatusConflict {
		t.Fatalf("while the other replica's heartbeat is fresh: %d %s, want 409", r.code, r.body)
	}
	if _, err := e.db.DB().ExecContext(ctx, `UPDATE benchmark_runs SET heartbeat_at = UTC_TIMESTAMP(6) - INTERVAL 3 SECOND WHERE id = ?`, dead.ID); err != nil {
		t.Fatal(err)
	}
	e.start(t, `{"notifications":5,"recipients":5,"channel":"sim"}`)
	if got, _ := store.GetRun(ctx, dead.ID); got.Run.Status != domain.StatusFailed {
		t.Fatalf("dead replica's run is %s", got.Run.Status)
	}
}

func TestCancelWhileCreating(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{lead: time.Hour, max: 1000000})
	ctx := context.Background()
	type result struct{ r response }
	done := make(chan result, 1)
	go func() {
		// 300,000 targets take a couple of seconds to create.
		done <- result{e.do(t, http.MethodPost, "/admin/benchmarks", bearer, `{"notifications":300000,"recipients":1000,"channel":"sim"}`)}
	}()
	var id string
	testkit.Eventually(t, 20*time.Second, func() error {
		var list struct{ Runs []domain.Run }
		r := e.do(t, http.MethodGet, "/admin/benchmarks", bearer, "")
		if err := json.Unmarshal(r.body, &list); err != nil || len(list.Runs) != 1 {
			return testkit.Errorf("runs: %s", r.body)
		}
		if list.Runs[0].Status != domain.StatusCreating {
			return testkit.Errorf("run is %s", list.Runs[0].Status)
		}
		id = list.Runs[0].ID
		return nil
	})
	r := e.do(t, http.MethodDelete, "/admin/benchmarks/"+id, bearer, "")
	if r.code != 200 || !strings.Contains(string(r.body), `"status":"cancelled"`) {
		t.Fatalf("DELETE while creating: %d %s", r.code, r.body)
	}
	res := <-done
	if res.r.code != http.StatusConflict || !strings.Contains(res.r.errMsg(), "cancelled while its targets were being created") {
		t.Fatalf("POST: %d %s", res.r.code, res.r.body)
	}
	if n, err := e.db.CountTargets(ctx, id); err != nil || n != 0 {
		t.Fatalf("%d targets left (%v)", n, err)
	}
	// The slot is free.
	e.start(t, `{"notifications":3,"recipients":3,"channel":"sim"}`)
}

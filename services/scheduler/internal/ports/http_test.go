package ports_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/lib/netguard"
	"github.com/notiflow/notiflow/lib/obs"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/scheduler/internal/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
	"github.com/notiflow/notiflow/services/scheduler/internal/ports"
)

const token = "test-token-0123456789"

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

type server struct {
	url     string
	store   *adapters.MySQLStore
	clock   *clock
	rdb     *redis.Client
	prefix  string
	secrets *app.WebhookSecrets
	// templates is set when the server serves managed templates.
	templates *app.Templates
}

func newServer(t *testing.T) *server {
	t.Helper()
	return serve(t, domain.Limits{MaxParamsBytes: 64}, ports.Options{Token: token, MaxParamsBytes: 64, MaxBulkBodyBytes: 4096})
}

// serve starts the API with limits and opts over a store of its own;
// opts.Parked, when nil, is that store; opts.Secrets, when nil, writes to
// a Redis prefix of the test's own.
func serve(t *testing.T, limits domain.Limits, opts ports.Options) *server {
	t.Helper()
	return serveAllow(t, limits, opts, nil)
}

// serveAllow is serve with the webhook guard's allow list (the
// NOTIFLOW_WEBHOOK_ALLOW entries) set to allow.
func serveAllow(t *testing.T, limits domain.Limits, opts ports.Options, allow []string) *server {
	t.Helper()
	return serveFull(t, limits, opts, allow, false)
}

// serveFull is serveAllow with, when templates is set, the managed
// templates served (/v1/templates) and checked at target creation, their
// Redis copy under the server's prefix.
func serveFull(t *testing.T, limits domain.Limits, opts ports.Options, allow []string, templates bool) *server {
	t.Helper()
	ctx := context.Background()
	store, err := adapters.OpenMySQL(ctx, testkit.MySQLDSN(t), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if opts.Parked == nil {
		opts.Parked = store
	}
	clk := &clock{t: time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)}
	targets := app.NewTargets(store, limits, 5, clk.Now)
	rdb, prefix := testkit.Redis(t)
	if opts.Secrets == nil {
		opts.Secrets = app.NewWebhookSecrets(store, adapters.NewSecretCache(rdb, prefix), app.WebhookSecretsOptions{Grace: 24 * time.Hour, Clock: clk.Now}, nil)
	}
	targets.UseSecrets(opts.Secrets)
	hooks, err := netguard.NewGuard(allow)
	if err != nil {
		t.Fatal(err)
	}
	targets.UseWebhookGuard(hooks, nil)
	if templates {
		static, err := app.StaticTemplates(nil)
		if err != nil {
			t.Fatal(err)
		}
		tm, err := app.NewTemplates(store, adapters.NewTemplateCopy(rdb, prefix), app.TemplatesOptions{Static: static, SyncEvery: time.Second, Clock: clk.Now}, nil)
		if err != nil {
			t.Fatal(err)
		}
		opts.Templates = tm
		targets.UseTemplates(tm)
	}
	mux := obs.Mux(obs.NewHealth(nil), obs.NewRegistry())
	ports.NewAPI(targets, opts, slog.New(slog.NewTextHandler(io.Discard, nil))).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &server{url: srv.URL, store: store, clock: clk, rdb: rdb, prefix: prefix, secrets: opts.Secrets, templates: opts.Templates}
}

type response struct {
	code int
	body []byte
}

func (r response) errMsg() string {
	var e struct{ Error string }
	_ = json.Unmarshal(r.body, &e)
	return e.Error
}

func (s *server) do(t *testing.T, method, path, auth, contentType, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{code: resp.StatusCode, body: b}
}

func (s *server) call(t *testing.T, method, path, body string) response {
	t.Helper()
	ct := ""
	if body != "" {
		ct = "application/json"
	}
	return s.do(t, method, path, "Bearer "+token, ct, body)
}

func (s *server) count(t *testing.T) (rows int) {
	t.Helper()
	if err := s.store.DB().QueryRow(`SELECT COUNT(*) FROM notification_targets`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	return rows
}

type targetJSON struct {
	ID        int64           `json:"id"`
	Recipient string          `json:"recipient_id"`
	Channel   string          `json:"channel"`
	Webhook   string          `json:"webhook_url"`
	Params    json.RawMessage `json:"params"`
	DueAt     *time.Time      `json:"due_at"`
	Cron      string          `json:"cron"`
	TimeZone  string          `json:"time_zone"`
	NextRunAt time.Time       `json:"next_run_at"`
	Status    string          `json:"status"`
}

func decodeTarget(t *testing.T, r response) targetJSON {
	t.Helper()
	var tg targetJSON
	if err := json.Unmarshal(r.body, &tg); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return tg
}

// TestRejectedRequests: every bad input gets its documented status and
// message, and writes nothing.
func TestRejectedRequests(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	valid := `{"recipient_id":"u1","channel":"inbox","template_id":"t1","due_at":"2026-03-08T09:00:00Z"}`
	bulkOf := func(items ...string) string { return `{"targets":[` + strings.Join(items, ",") + `]}` }
	tests := []struct {
		name     string
		method   string
		path     string
		auth     string // "" means the valid token
		ctype    string // "" means application/json
		body     string
		wantCode int
		wantMsg  string
	}{
		{name: "no token", path: "/v1/targets", auth: "-", body: valid, wantCode: 401, wantMsg: "missing or invalid bearer token"},
		{name: "wrong token", path: "/v1/targets", auth: "Bearer nope", body: valid, wantCode: 401, wantMsg: "missing or invalid bearer token"},
		{name: "token without Bearer", path: "/v1/targets", auth: token, body: valid, wantCode: 401, wantMsg: "missing or invalid bearer token"},
		{name: "read without token", method: "GET", path: "/v1/targets", auth: "-", wantCode: 401, wantMsg: "missing or invalid bearer token"},
		{name: "bulk without token", path: "/v1/targets:bulk", auth: "Bearer x", body: bulkOf(valid), wantCode: 401, wantMsg: "missing or invalid bearer token"},
		{name: "pause without token", path: "/v1/targets/1/pause", auth: "-", wantCode: 401, wantMsg: "missing or invalid bearer token"},
		{name: "delete without token", method: "DELETE", path: "/v1/targets/1", auth: "-", wantCode: 401, wantMsg: "missing or invalid bearer token"},
		{name: "rotate without token", path: "/v1/targets/1/webhook-secret:rotate", auth: "-", wantCode: 401, wantMsg: "missing or invalid bearer token"},
		{name: "rotate wrong token", path: "/v1/targets/1/webhook-secret:rotate", auth: "Bearer nope", wantCode: 401, wantMsg: "missing or invalid bearer token"},
		{name: "rotate bad id", path: "/v1/targets/x1/webhook-secret:rotate", wantCode: 400, wantMsg: "id: must be a positive integer"},
		{name: "rotate missing", path: "/v1/targets/999999/webhook-secret:rotate", wantCode: 404, wantMsg: "target not found"},
		{name: "unknown field", body: `{"recipient_id":"u1","channel":"inbox","template_id":"t1","due_at":"2026-03-08T09:00:00Z","priority":1}`, wantCode: 400, wantMsg: `unknown field "priority"`},
		{name: "malformed JSON", body: `{"recipient_id":`, wantCode: 400, wantMsg: "malformed JSON"},
		{name: "trailing data", body: valid + `{}`, wantCode: 400, wantMsg: "malformed JSON: unexpected data after the object"},
		{name: "empty body", body: ``, wantCode: 400, wantMsg: "empty body"},
		{name: "not an object", body: `[1,2]`, wantCode: 400, wantMsg: "body must be a JSON object"},
		{name: "wrong type", body: `{"recipient_id":5,"channel":"inbox","template_id":"t1","due_at":"2026-03-08T09:00:00Z"}`, wantCode: 400, wantMsg: "recipient_id: must be a string"},
		{name: "form content type", ctype: "application/x-www-form-urlencoded", body: valid, wantCode: 415, wantMsg: "Content-Type must be application/json"},
		{name: "bad cron", body: `{"recipient_id":"u1","channel":"inbox","template_id":"t1","cron":"61 * * * *"}`, wantCode: 400, wantMsg: "cron: invalid cron expression"},
		{name: "cron never fires", body: `{"recipient_id":"u1","channel":"inbox","template_id":"t1","cron":"0 0 30 2 *"}`, wantCode: 400, wantMsg: "cron: invalid cron expression: the expression never fires"},
		{name: "unknown time zone", body: `{"recipient_id":"u1","channel":"inbox","template_id":"t1","cron":"@daily","time_zone":"Mars/Olympus"}`, wantCode: 400, wantMsg: `time_zone: unknown time zone: "Mars/Olympus"`},
		{name: "time zone with due_at", body: `{"recipient_id":"u1","channel":"inbox","template_id":"t1","due_at":"2026-03-08T09:00:00Z","time_zone":"UTC"}`, wantCode: 400, wantMsg: "time_zone: applies to cron schedules only"},
		{name: "bad channel", body: `{"recipient_id":"u1","channel":"sms","template_id":"t1","cron":"@daily"}`, wantCode: 400, wantMsg: `channel: unknown channel "sms" (want webhook, inbox or sim)`},
		{name: "missing channel", body: `{"recipient_id":"u1","template_id":"t1","cron":"@daily"}`, wantCode: 400, wantMsg: "channel: is required"},
		{name: "webhook without url", body: `{"recipient_id":"u1","channel":"webhook","template_id":"t1","cron":"@daily"}`, wantCode: 400, wantMsg: "webhook_url: is required for channel webhook"},
		{name: "webhook with ftp url", body: `{"recipient_id":"u1","channel":"webhook","webhook_url":"ftp://x/y","template_id":"t1","cron":"@daily"}`, wantCode: 400, wantMsg: "webhook_url: must be an absolute http or https URL"},
		{name: "webhook not a url", body: `{"recipient_id":"u1","channel":"webhook","webhook_url":"example.com/hook","template_id":"t1","cron":"@daily"}`, wantCode: 400, wantMsg: "webhook_url: must be an absolute http or https URL"},
		{name: "url on inbox", body: `{"recipient_id":"u1","channel":"inbox","webhook_url":"https://x/y","template_id":"t1","cron":"@daily"}`, wantCode: 400, wantMsg: "webhook_url: is only allowed for channel webhook"},
		{name: "params not an object", body: `{"recipient_id":"u1","channel":"inbox","template_id":"t1","cron":"@daily","params":[1]}`, wantCode: 400, wantMsg: "params: must be a JSON object"},
		{name: "params string", body: `{"recipient_id":"u1","channel":"inbox","template_id":"t1","cron":"@daily","params":"x"}`, wantCode: 400, wantMsg: "params: must be a JSON object"},
		{name: "params oversized", body: `{"recipient_id":"u1","channel":"inbox","template_id":"t1","cron":"@daily","params":{"k":"` + strings.Repeat("x", 80) + `"}}`, wantCode: 400, wantMsg: "params: 88 bytes exceed the limit of 64"},
		{name: "body oversized", body: `{"recipient_id":"` + strings.Repeat("x", 9000) + `"}`, wantCode: 413, wantMsg: "request body exceeds 8256 bytes"},
		{name: "missing recipient", body: `{"channel":"inbox","template_id":"t1","cron":"@daily"}`, wantCode: 400, wantMsg: "recipient_id: is required"},
		{name: "recipient too long", body: `{"recipient_id":"` + strings.Repeat("r", 192) + `","channel":"inbox","template_id":"t1","cron":"@daily"}`, wantCode: 400, wantMsg: "recipient_id: longer than 191 bytes"},
		{name: "missing template", body: `{"recipient_id":"u1","channel":"inbox","cron":"@daily"}`, wantCode: 400, wantMsg: "template_id: is required"},
		{name: "both due_at and cron", body: `{"recipient_id":"u1","channel":"inbox","template_id":"t1","cron":"@daily","due_at":"2026-03-08T09:00:00Z"}`, wantCode: 400, wantMsg: "schedule: give either due_at or cron, not both"},
		{name: "neither due_at nor cron", body: `{"recipient_id":"u1","channel":"inbox","template_id":"t1"}`, wantCode: 400, wantMsg: "schedule: give either due_at or cron"},
		{name: "bad due_at", body: `{"recipient_id":"u1","channel":"inbox","template_id":"t1","due_at":"tomorrow"}`, wantCode: 400, wantMsg: "due_at: must be an RFC 3339 time"},
		{name: "bulk over the limit", path: "/v1/targets:bulk", body: bulkOf(valid, valid, valid, valid, valid, valid), wantCode: 400, wantMsg: "targets: 6 targets, the limit is 5"},
		{name: "bulk empty", path: "/v1/targets:bulk", body: `{"targets":[]}`, wantCode: 400, wantMsg: "targets: must contain at least one target"},
		{name: "bulk one invalid", path: "/v1/targets:bulk", body: bulkOf(valid, valid, `{"recipient_id":"u1","channel":"inbox","template_id":"t1","cron":"@sometimes"}`), wantCode: 400, wantMsg: "targets[2].cron: invalid cron expression"},
		{name: "bulk one bad time", path: "/v1/targets:bulk", body: bulkOf(valid, `{"recipient_id":"u1","channel":"inbox","template_id":"t1","due_at":"soon"}`), wantCode: 400, wantMsg: "targets[1].due_at: must be an RFC 3339 time"},
		{name: "bulk unknown field", path: "/v1/targets:bulk", body: bulkOf(`{"recipient":"u1"}`), wantCode: 400, wantMsg: `unknown field "recipient"`},
		{name: "bulk body oversized", path: "/v1/targets:bulk", body: bulkOf(strings.Repeat(valid+",", 60) + valid), wantCode: 413, wantMsg: "request body exceeds 4096 bytes"},
		{name: "get bad id", method: "GET", path: "/v1/targets/abc", wantCode: 400, wantMsg: "id: must be a positive integer"},
		{name: "get missing", method: "GET", path: "/v1/targets/999999", wantCode: 404, wantMsg: "target not found"},
		{name: "pause missing", path: "/v1/targets/999999/pause", wantCode: 404, wantMsg: "target not found"},
		{name: "resume missing", path: "/v1/targets/999999/resume", wantCode: 404, wantMsg: "target not found"},
		{name: "delete missing", method: "DELETE", path: "/v1/targets/999999", wantCode: 404, wantMsg: "target not found"},
		{name: "list bad limit", method: "GET", path: "/v1/targets?limit=0", wantCode: 400, wantMsg: "limit: must be an integer between 1 and 1000"},
		{name: "list bad cursor", method: "GET", path: "/v1/targets?after=-1", wantCode: 400, wantMsg: "after: must be a non-negative integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, path, auth, ctype := tt.method, tt.path, tt.auth, tt.ctype
			if method == "" {
				method = "POST"
			}
			if path == "" {
				path = "/v1/targets"
			}
			switch auth {
			case "":
				auth = "Bearer " + token
			case "-":
				auth = ""
			}
			if ctype == "" && tt.body != "" {
				ctype = "application/json"
			}
			before := s.count(t)
			r := s.do(t, method, path, auth, ctype, tt.body)
			if r.code != tt.wantCode || !strings.Contains(r.errMsg(), tt.wantMsg) {
				t.Errorf("got %d %s; want %d with %q", r.code, r.body, tt.wantCode, tt.wantMsg)
			}
			if tt.wantCode == 401 && r.code == 401 && r.errMsg() != tt.wantMsg {
				t.Errorf("401 message %q", r.errMsg())
			}
			if after := s.count(t); after != before {
				t.Errorf("a rejected request wrote %d rows", after-before)
			}
		})
	}
}

func TestTargetLifecycle(t *testing.T) {
	t.Parallel()
	s := newServer(t)

	r := s.call(t, "POST", "/v1/targets", `{"recipient_id":"u1","channel":"webhook","webhook_url":"https://example.com/h","template_id":"digest",
		"params":{ "name" : "Ada" },"cron":"0 9 * * *","time_zone":"America/New_York"}`)
	if r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	cron := decodeTarget(t, r)
	// The clock says 2026-03-07T12:00Z = 07:00 in New York: next 09:00 EST.
	if cron.Status != "active" || !cron.NextRunAt.Equal(time.Date(2026, 3, 7, 14, 0, 0, 0, time.UTC)) ||
		string(cron.Params) != `{"name":"Ada"}` || cron.TimeZone != "America/New_York" || cron.DueAt != nil {
		t.Fatalf("created: %s", r.body)
	}
	got := s.call(t, "GET", fmt.Sprintf("/v1/targets/%d", cron.ID), "")
	if got.code != 200 || decodeTarget(t, got).ID != cron.ID {
		t.Fatalf("get: %d %s", got.code, got.body)
	}

	// Pause, then resume two days later: next_run_at is recomputed from
	// then, across the DST change (09:00 EDT = 13:00Z).
	if r := s.call(t, "POST", fmt.Sprintf("/v1/targets/%d/pause", cron.ID), ""); r.code != 200 || decodeTarget(t, r).Status != "paused" {
		t.Fatalf("pause: %d %s", r.code, r.body)
	}
	if r := s.call(t, "POST", fmt.Sprintf("/v1/targets/%d/pause", cron.ID), ""); r.code != 200 {
		t.Fatalf("pause again: %d %s", r.code, r.body)
	}
	s.clock.Add(48 * time.Hour)
	r = s.call(t, "POST", fmt.Sprintf("/v1/targets/%d/resume", cron.ID), "")
	if r.code != 200 {
		t.Fatalf("resume: %d %s", r.code, r.body)
	}
	if tg := decodeTarget(t, r); tg.Status != "active" || !tg.NextRunAt.Equal(time.Date(2026, 3, 9, 13, 0, 0, 0, time.UTC)) {
		t.Fatalf("resumed: %s", r.body)
	}

	// A one-shot that fired is done: it can be neither paused nor resumed.
	r = s.call(t, "POST", "/v1/targets", `{"recipient_id":"u2","channel":"sim","template_id":"t","due_at":"2026-03-08T09:00:00+01:00"}`)
	if r.code != 201 {
		t.Fatalf("create one-shot: %d %s", r.code, r.body)
	}
	once := decodeTarget(t, r)
	if once.DueAt == nil || !once.DueAt.Equal(time.Date(2026, 3, 8, 8, 0, 0, 0, time.UTC)) || string(once.Params) != `{}` {
		t.Fatalf("one-shot: %s", r.body)
	}
	// Fired: a claim took its queue entry (the stored status is settled
	// later); then settled as well.
	for _, q := range []string{`DELETE FROM target_due WHERE target_id = ?`, `UPDATE notification_targets SET status = 'done' WHERE id = ?`} {
		if _, err := s.store.DB().Exec(q, once.ID); err != nil {
			t.Fatal(err)
		}
		if r := s.call(t, "GET", fmt.Sprintf("/v1/targets/%d", once.ID), ""); r.code != 200 || decodeTarget(t, r).Status != "done" {
			t.Errorf("get a fired one-shot: %d %s", r.code, r.body)
		}
		for _, action := range []string{"pause", "resume"} {
			r := s.call(t, "POST", fmt.Sprintf("/v1/targets/%d/%s", once.ID, action), "")
			if r.code != 409 || r.errMsg() != "cannot "+action+" a target that is done" {
				t.Errorf("%s a done target: %d %s", action, r.code, r.body)
			}
		}
	}

	if r := s.call(t, "DELETE", fmt.Sprintf("/v1/targets/%d", cron.ID), ""); r.code != 204 {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}
	if r := s.call(t, "GET", fmt.Sprintf("/v1/targets/%d", cron.ID), ""); r.code != 404 {
		t.Fatalf("get deleted: %d %s", r.code, r.body)
	}
	if r := s.call(t, "DELETE", fmt.Sprintf("/v1/targets/%d", cron.ID), ""); r.code != 404 {
		t.Fatalf("delete again: %d %s", r.code, r.body)
	}
}

func TestBulkAndPagination(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	var items []string
	for i := 0; i < 5; i++ {
		items = append(items, fmt.Sprintf(`{"recipient_id":"u%d","channel":"inbox","template_id":"t","cron":"*/5 * * * *"}`, i))
	}
	var ids []int64
	for round := 0; round < 2; round++ {
		r := s.call(t, "POST", "/v1/targets:bulk", `{"targets":[`+strings.Join(items, ",")+`]}`)
		if r.code != 201 {
			t.Fatalf("bulk: %d %s", r.code, r.body)
		}
		var resp struct {
			Count int
			IDs   []int64
		}
		if err := json.Unmarshal(r.body, &resp); err != nil || resp.Count != 5 || len(resp.IDs) != 5 {
			t.Fatalf("bulk response %s: %v", r.body, err)
		}
		ids = append(ids, resp.IDs...)
	}
	if n := s.count(t); n != 10 {
		t.Fatalf("rows = %d, want 10", n)
	}
	// Delete one: pagination leaves it out.
	if r := s.call(t, "DELETE", fmt.Sprintf("/v1/targets/%d", ids[3]), ""); r.code != 204 {
		t.Fatalf("delete: %d", r.code)
	}
	var seen []int64
	path := "/v1/targets?limit=3"
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		r := s.call(t, "GET", path, "")
		if r.code != 200 {
			t.Fatalf("list: %d %s", r.code, r.body)
		}
		var page struct {
			Targets   []targetJSON
			NextAfter *int64 `json:"next_after"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		for _, tg := range page.Targets {
			seen = append(seen, tg.ID)
		}
		if page.NextAfter == nil {
			break
		}
		path = fmt.Sprintf("/v1/targets?limit=3&after=%d", *page.NextAfter)
	}
	want := append(append([]int64{}, ids[:3]...), ids[4:]...)
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("pages gave %v, want %v", seen, want)
	}
}

func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	r := s.do(t, "GET", "/openapi.yaml", "", "", "")
	if r.code != 200 || !bytes.HasPrefix(r.body, []byte("openapi: 3.")) {
		t.Fatalf("openapi.yaml: %d %.40s", r.code, r.body)
	}
	for _, p := range []string{"/v1/targets:", "/v1/targets:bulk:", "/v1/targets/{id}:", "/v1/targets/{id}/pause:", "/v1/targets/{id}/resume:", "/v1/targets/{id}/webhook-secret:rotate:", "bearer",
		"/v1/notifications:", "/v1/notifications/{notification_id}:", "/v1/recipients/{recipient_id}/inbox:",
		"/v1/recipients/{recipient_id}/inbox/unread_count:", "/v1/recipients/{recipient_id}/inbox/read:"} {
		if !bytes.Contains(r.body, []byte(p)) {
			t.Errorf("openapi.yaml does not document %s", p)
		}
	}
}

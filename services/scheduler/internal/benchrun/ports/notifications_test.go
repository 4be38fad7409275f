package ports_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/ports"
)

// TestAdminNotificationsRelaysTheSink reads a target's and a recipient's
// last notifications through the scheduler from a real sink process that
// persisted them from its results topic.
func TestAdminNotificationsRelaysTheSink(t *testing.T) {
	t.Parallel()
	sink := seededSink(t)
	e := newEnv(t, envOpts{lead: time.Hour, sink: ports.SinkAPI{BaseURL: sink.url, Token: token}})

	code, body := adminGet(t, e, "/admin/notifications?target_id=4242")
	if code != http.StatusOK {
		t.Fatalf("target 4242: %d %v", code, body)
	}
	rows, _ := body["notifications"].([]any)
	got := map[string]string{}
	for _, r := range rows {
		n := r.(map[string]any)
		got[n["notification_id"].(string)] = n["status"].(string) + "/" + n["error"].(string)
	}
	want := map[string]string{"nf-test-1": "delivered/", "nf-test-2": "failed/provider answered 503 three times", "nf-test-3": "rate_limited/rate limited"}
	if len(got) != len(want) {
		t.Fatalf("target 4242: got %v, want %v", got, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s: got %q, want %q", id, got[id], w)
		}
	}

	code, body = adminGet(t, e, "/admin/notifications?recipient_id=carol&limit=5")
	rows, _ = body["notifications"].([]any)
	if code != http.StatusOK || len(rows) != 1 || rows[0].(map[string]any)["notification_id"] != "nf-test-4" {
		t.Fatalf("recipient carol: %d %v", code, body)
	}
}

// TestAdminNotificationsRefuses checks the route's answers without a
// token, on bad input (naming the field), without a configured sink API
// and with an unreachable one.
func TestAdminNotificationsRefuses(t *testing.T) {
	t.Parallel()
	ln := closedAddr(t)
	configured := newEnv(t, envOpts{lead: time.Hour, sink: ports.SinkAPI{BaseURL: "http://" + ln, Token: token}})
	unset := newEnv(t, envOpts{lead: time.Hour})

	resp, err := http.Get(configured.url + "/admin/notifications?target_id=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", resp.StatusCode)
	}

	tests := []struct {
		name, give string
		e          *env
		wantCode   int
		wantMsg    string
	}{
		{"neither id", "", configured, 400, "target_id or recipient_id"},
		{"both ids", "target_id=1&recipient_id=bob", configured, 400, "target_id, recipient_id"},
		{"target not a number", "target_id=abc", configured, 400, "target_id: must be a positive integer"},
		{"target zero", "target_id=0", configured, 400, "target_id"},
		{"recipient too long", "recipient_id=" + strings.Repeat("r", 192), configured, 400, "recipient_id: must be at most 191"},
		{"limit zero", "target_id=1&limit=0", configured, 400, "limit: must be an integer between 1 and 100"},
		{"limit too large", "target_id=1&limit=101", configured, 400, "limit"},
		{"sink unreachable", "target_id=1", configured, 502, "sink API (NOTIFLOW_SINK_API_URL) unreachable"},
		{"not configured", "target_id=1", unset, 503, "NOTIFLOW_SINK_API_URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := adminGet(t, tt.e, "/admin/notifications?"+tt.give)
			msg, _ := body["error"].(string)
			if code != tt.wantCode || !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("%s: %d %q, want %d with %q", tt.give, code, msg, tt.wantCode, tt.wantMsg)
			}
		})
	}
}

// TestAdminNotificationsSinkRefusesToken: a sink with another token
// answers 401, which the route reports as the token mismatch it is.
func TestAdminNotificationsSinkRefusesToken(t *testing.T) {
	t.Parallel()
	sink := startSink(t)
	e := newEnv(t, envOpts{lead: time.Hour, sink: ports.SinkAPI{BaseURL: sink.url, Token: "not-the-sinks-token"}})
	code, body := adminGet(t, e, "/admin/notifications?recipient_id="+url.QueryEscape("bob"))
	if msg, _ := body["error"].(string); code != http.StatusBadGateway || !strings.Contains(msg, "refused the scheduler's token") {
		t.Errorf("%d %v, want 502 naming the token", code, body)
	}
}

// TestAdminPageShowsNotifications loads the admin page in headless
// Chromium with a target id in the fragment and checks the panel's table
// holds the target's rows as the real sink stored them; without a sink
// API the panel says it is not configured.
func TestAdminPageShowsNotifications(t *testing.T) {
	t.Parallel()
	sink := seededSink(t)
	e := newEnv(t, envOpts{lead: time.Hour, sink: ports.SinkAPI{BaseURL: sink.url, Token: token}})
	dom := dumpDOM(t, e.url+"/admin/#token="+token+"&target_id=4242")
	rows := strings.Count(dom, `class="nf-row"`)
	if rows != 3 {
		t.Fatalf("%d notification rows in the panel, want 3; DOM:\n%s", rows, dom)
	}
	for _, want := range []string{"nf-test-2", `<td class="nf-status">failed</td>`, "provider answered 503 three times", `<td class="nf-status">rate_limited</td>`} {
		if !strings.Contains(dom, want) {
			t.Errorf("panel lacks %q", want)
		}
	}
	if strings.Contains(dom, "nf-test-4") {
		t.Errorf("panel shows another target's notification")
	}

	unset := newEnv(t, envOpts{lead: time.Hour})
	dom = dumpDOM(t, unset.url+"/admin/#token="+token)
	if !strings.Contains(dom, "the sink API is not configured") {
		t.Errorf("without NOTIFLOW_SINK_API_URL the panel does not say so; DOM:\n%s", dom)
	}
}

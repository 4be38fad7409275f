package adapters

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

func testWebhook(t testing.TB, mutate func(*WebhookOptions)) (*Webhook, *prometheus.GaugeVec) {
	t.Helper()
	state := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "state"}, []string{"endpoint"})
	opt := WebhookOptions{
		AttemptTimeout: time.Second, MaxElapsed: 200 * time.Millisecond,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		BreakerFailures: 3, BreakerCooldown: time.Second,
		Allow: []string{"127.0.0.1/32"}, MaxConnsPerHost: 8, CircuitState: state,
	}
	if mutate != nil {
		mutate(&opt)
	}
	w, err := NewWebhook(opt)
	if err != nil {
		t.Fatalf("NewWebhook: %v", err)
	}
	t.Cleanup(w.Close)
	return w, state
}

func due(id, url string) *notiflowv1.NotificationDue {
	return &notiflowv1.NotificationDue{NotificationId: id, RecipientId: "r", WebhookUrl: url, Sequence: 1}
}

// The breaker opens after N consecutive failures (then no request is made
// while it is open), half-opens after the cool-down with one trial request,
// re-opens when the trial fails and closes when it succeeds.
func TestWebhookCircuitBreaker(t *testing.T) {
	t.Parallel()
	healthy := make(chan bool, 1)
	healthy <- false
	rcv := testkit.NewReceiver(t, func(testkit.Call, int) int {
		ok := <-healthy
		healthy <- ok
		if ok {
			return http.StatusOK
		}
		return http.StatusInternalServerError
	})
	w, state := testWebhook(t, nil)
	endpoint := "http://" + strings.TrimPrefix(rcv.URL, "http://")
	ctx := context.Background()
	gauge := func() float64 { return testutil.ToFloat64(state.WithLabelValues(endpoint)) }

	out, err := w.Send(ctx, due("a", rcv.URL+"/x"), "body")
	if err != nil || out.Status != notiflowv1.Status_STATUS_FAILED || out.Attempts != 3 || out.ProviderCode != 500 || !out.DeadLetter {
		t.Fatalf("first send: %+v, %v; want failed after 3 attempts with code 500", out, err)
	}
	if !strings.Contains(out.Err, "circuit open") || !strings.Contains(out.Err, "HTTP 500") {
		t.Errorf("first send error %q should say the circuit is open and the last failure", out.Err)
	}
	if n := strings.Count(out.Err, "circuit open"); n != 1 {
		t.Errorf("first send error says the circuit is open %d times, want once: %q", n, out.Err)
	}
	if n := len(rcv.Calls()); n != 3 || gauge() != 2 {
		t.Fatalf("after the first send: %d calls, gauge %v; want 3 calls, open (2)", n, gauge())
	}

	out, _ = w.Send(ctx, due("b", rcv.URL+"/x"), "body")
	if out.Status != notiflowv1.Status_STATUS_FAILED || out.Attempts != 0 || !strings.Contains(out.Err, "circuit open") {
		t.Fatalf("send while open: %+v; want failed fast, no attempt", out)
	}
	if n := len(rcv.Calls()); n != 3 {
		t.Fatalf("send while open made %d requests", n-3)
	}

	halfOpen := func() error {
		if s := w.CircuitState(endpoint); s != "half-open" {
			return testkit.Errorf("circuit %s", s)
		}
		return nil
	}
	testkit.Eventually(t, 5*time.Second, halfOpen)
	if gauge() != 1 {
		t.Fatalf("gauge %v, want half-open (1)", gauge())
	}
	out, _ = w.Send(ctx, due("c", rcv.URL+"/x"), "body")
	if n := len(rcv.Calls()); out.Attempts != 1 || n != 4 || gauge() != 2 {
		t.Fatalf("failing trial: %d attempt(s), %d calls, gauge %v; want 1 trial, 4 calls, open again", out.Attempts, n, gauge())
	}

	<-healthy
	healthy <- true
	testkit.Eventually(t, 5*time.Second, halfOpen)
	out, _ = w.Send(ctx, due("d", rcv.URL+"/x"), "body")
	if out.Status != notiflowv1.Status_STATUS_DELIVERED || out.Attempts != 1 || gauge() != 0 {
		t.Fatalf("successful trial: %+v, gauge %v; want delivered and closed (0)", out, gauge())
	}
}

// Attempts are retried within the elapsed budget: a receiver that keeps
// answering 503 makes the send fail with the last code once the budget is
// spent, and a 3xx is final (redirects are not followed).
func TestWebhookBudgetAndRedirect(t *testing.T) {
	t.Parallel()
	rcv := testkit.NewReceiver(t, func(c testkit.Call, _ int) int {
		if c.Path == "/moved" {
			return http.StatusFound
		}
		return http.StatusServiceUnavailable
	})
	w, _ := testWebhook(t, func(o *WebhookOptions) { o.BreakerFailures = 1000 })
	start := time.Now()
	out, _ := w.Send(context.Background(), due("a", rcv.URL+"/busy?token=secret"), "b")
	if out.Status != notiflowv1.Status_STATUS_FAILED || out.ProviderCode != 503 || out.Attempts < 3 {
		t.Fatalf("503 forever: %+v; want failed with code 503 after several attempts", out)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("send took %s, budget 200ms", el)
	}
	if strings.Contains(out.Err, "secret") {
		t.Fatalf("error text leaks the URL query: %q", out.Err)
	}
	out, _ = w.Send(context.Background(), due("b", rcv.URL+"/moved"), "b")
	if out.Status != notiflowv1.Status_STATUS_FAILED || out.ProviderCode != 302 || out.Attempts != 1 {
		t.Fatalf("302: %+v; want failed at once", out)
	}
}

// Destinations on internal addresses are refused before any connection,
// whether the URL names the address or a host name resolving to it.
func TestWebhookRefusesInternalDestinations(t *testing.T) {
	t.Parallel()
	rcv := testkit.NewReceiver(t, nil)
	port := rcv.URL[strings.LastIndex(rcv.URL, ":")+1:]
	w, _ := testWebhook(t, func(o *WebhookOptions) { o.Allow = nil })
	for _, url := range []string{
		"http://10.0.0.1/hook",
		"http://169.254.169.254/latest/meta-data/",
		"http://[::1]:" + port + "/hook",
		"http://127.0.0.1:" + port + "/hook",
		"http://localhost:" + port + "/hook", // resolved, then refused at dial time
		"http://0.0.0.0:" + port + "/hook",
		"http://[::ffff:127.0.0.1]:" + port + "/hook",
	} {
		out, err := w.Send(context.Background(), due("x", url), "b")
		if err != nil || out.Status != notiflowv1.Status_STATUS_FAILED || !out.DeadLetter ||
			!strings.Contains(out.Err, "webhook destination refused") || !strings.Contains(out.Err, "NOTIFLOW_WEBHOOK_ALLOW") {
			t.Errorf("%s: %+v, %v; want refused", url, out, err)
		}
	}
	if n := len(rcv.Calls()); n != 0 {
		t.Fatalf("receiver got %d calls, want none", n)
	}
	for _, bad := range []string{"ftp://example.com/x", "http:///nohost", "::not a url"} {
		out, _ := w.Send(context.Background(), due("y", bad), "b")
		if out.Status != notiflowv1.Status_STATUS_FAILED || !strings.Contains(out.Err, "invalid webhook url") {
			t.Errorf("%q: %+v; want invalid url", bad, out)
		}
	}

	// A host name on the allow list may resolve to loopback.
	w2, _ := testWebhook(t, func(o *WebhookOptions) { o.Allow = []string{"localhost"} })
	out, _ := w2.Send(context.Background(), due("z", "http://localhost:"+port+"/ok"), "b")
	if out.Status != notiflowv1.Status_STATUS_DELIVERED {
		t.Fatalf("allow-listed host: %+v", out)
	}
}

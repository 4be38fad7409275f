package adapters

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

// Many endpoints do not make many series: past CircuitSeries endpoints,
// the rest share the "other" series, which shows the worst state among
// them.
func TestWebhookCircuitSeriesBounded(t *testing.T) {
	t.Parallel()
	w, state := testWebhook(t, func(o *WebhookOptions) { o.CircuitSeries = 5 })
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		code := http.StatusOK
		if i == 19 {
			code = http.StatusInternalServerError // its circuit opens
		}
		rcv := testkit.NewReceiver(t, func(testkit.Call, int) int { return code })
		if _, err := w.Send(ctx, due("n", rcv.URL+"/x"), "body"); err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.CollectAndCount(state); n != 6 {
		t.Fatalf("%d circuit series for 20 endpoints, want 6 (5 endpoints and other)", n)
	}
	if v := testutil.ToFloat64(state.WithLabelValues(OtherEndpoint)); v != 2 {
		t.Fatalf("other series = %v, want 2 (an open circuit among the endpoints past the cap)", v)
	}
}

// An endpoint without a send in progress for CircuitIdle loses its series
// (and its breaker); one whose send is still running keeps it.
func TestWebhookCircuitSeriesIdle(t *testing.T) {
	t.Parallel()
	w, state := testWebhook(t, func(o *WebhookOptions) {
		o.BreakerCooldown = 100 * time.Millisecond
		o.CircuitIdle = 300 * time.Millisecond
		o.MaxElapsed = 10 * time.Second
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Run(ctx) }()

	for i := 0; i < 3; i++ {
		rcv := testkit.NewReceiver(t, nil)
		if out, err := w.Send(ctx, due("n", rcv.URL+"/x"), "body"); err != nil || out.Status != notiflowv1.Status_STATUS_DELIVERED {
			t.Fatalf("send: %+v, %v", out, err)
		}
	}
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	slow := testkit.NewReceiver(t, func(testkit.Call, int) int { <-release; return http.StatusOK })
	t.Cleanup(unblock) // runs before the receiver closes, even when the test fails
	sent := make(chan error, 1)
	go func() { _, err := w.Send(ctx, due("slow", slow.URL+"/x"), "body"); sent <- err }()
	slowEndpoint := "http://" + strings.TrimPrefix(slow.URL, "http://")

	testkit.Eventually(t, 5*time.Second, func() error {
		if n := testutil.CollectAndCount(state); n != 1 {
			return testkit.Errorf("%d circuit series, want only the busy endpoint's", n)
		}
		return nil
	})
	if w.CircuitState(slowEndpoint) == "" {
		t.Fatal("the breaker of an endpoint with a send in progress was dropped")
	}
	unblock()
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if n := testutil.CollectAndCount(state); n != 0 {
			return testkit.Errorf("%d circuit series left after every endpoint went idle", n)
		}
		return nil
	})
}

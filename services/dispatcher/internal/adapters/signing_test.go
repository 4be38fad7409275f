package adapters

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/lib/webhooksig"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

// verifier is a receiver's check with the specification's reference
// library, holding one secret.
func verifier(t *testing.T, secret string) *standardwebhooks.Webhook {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatalf("reference library refuses secret: %v", err)
	}
	return wh
}

func newSecret(t *testing.T) string {
	t.Helper()
	s, err := webhooksig.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// signingSetup returns a webhook signing with secrets from a real Redis
// (cache off, clock now()) and the Redis handles to store records with.
func signingSetup(t *testing.T, global []string, now func() time.Time, mutate func(*WebhookOptions)) (*Webhook, func(target uint64, rec webhooksig.Record), *Secrets) {
	t.Helper()
	rdb, prefix := testkit.Redis(t)
	b := NewBatcher(rdb, 64, 1, 2*time.Second, nil)
	testkit.Go(t, b.Run)
	secrets, err := NewSecrets(b, SecretsOptions{Prefix: prefix, Global: global, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := testWebhook(t, func(o *WebhookOptions) {
		o.Keys = secrets
		if mutate != nil {
			mutate(o)
		}
	})
	store := func(target uint64, rec webhooksig.Record) {
		t.Helper()
		if err := webhooksig.Store(context.Background(), rdb, prefix, target, rec); err != nil {
			t.Fatal(err)
		}
	}
	return w, store, secrets
}

func signedDue(id, url string, target uint64, required bool) *notiflowv1.NotificationDue {
	d := due(id, url)
	d.TargetId, d.WebhookSecretRequired = target, required
	return d
}

// A webhook signed with the target's own secret verifies with the
// reference library; the same request with a changed body, or checked with
// another secret, does not. Idempotency-Key stays, webhook-id is the
// notification id.
func TestWebhookSignatureVerifiedByReferenceLibrary(t *testing.T) {
	t.Parallel()
	rcv := testkit.NewReceiver(t, nil)
	secret := newSecret(t)
	w, store, _ := signingSetup(t, []string{newSecret(t)}, nil, nil)
	store(11, webhooksig.Record{Version: 1, Current: secret})

	out, err := w.Send(context.Background(), signedDue("n-sig-1", rcv.URL+"/h", 11, true), "hello")
	if err != nil || out.Status != notiflowv1.Status_STATUS_DELIVERED {
		t.Fatalf("send: %+v, %v", out, err)
	}
	c := rcv.Calls()[0]
	if got := c.Header.Get("webhook-id"); got != "n-sig-1" || c.IdempotencyKey != "n-sig-1" {
		t.Errorf("webhook-id %q, Idempotency-Key %q; want both n-sig-1", got, c.IdempotencyKey)
	}
	if err := verifier(t, secret).Verify(c.Raw, c.Header); err != nil {
		t.Fatalf("reference library rejects our signature: %v (header %q)", err, c.Header.Get("webhook-signature"))
	}
	tampered := []byte(strings.Replace(string(c.Raw), "hello", "hellO", 1))
	if err := verifier(t, secret).Verify(tampered, c.Header); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Errorf("tampered body: Verify = %v, want ErrNoMatchingSignature", err)
	}
	if err := verifier(t, newSecret(t)).Verify(c.Raw, c.Header); err == nil {
		t.Error("a receiver with another secret verified our call")
	}
}

// Each attempt is signed afresh: a retry carries the same webhook-id and a
// later webhook-timestamp, and verifies.
func TestWebhookRetryResigned(t *testing.T) {
	t.Parallel()
	rcv := testkit.NewReceiver(t, func(_ testkit.Call, n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	secret := newSecret(t)
	// The timestamp has whole seconds: wait over one between attempts. The
	// backoff's jitter waits between half and all of it, so 2.2 s waits at
	// least 1.1 s.
	w, store, _ := signingSetup(t, nil, nil, func(o *WebhookOptions) {
		o.BackoffMin, o.BackoffMax, o.MaxElapsed = 2200*time.Millisecond, 2200*time.Millisecond, 10*time.Second
	})
	store(12, webhooksig.Record{Version: 1, Current: secret})
	out, err := w.Send(context.Background(), signedDue("n-retry", rcv.URL+"/r", 12, true), "again")
	if err != nil || out.Status != notiflowv1.Status_STATUS_DELIVERED || out.Attempts != 2 {
		t.Fatalf("send: %+v, %v; want delivered on attempt 2", out, err)
	}
	calls := rcv.Calls()
	for i, c := range calls {
		if err := verifier(t, secret).Verify(c.Raw, c.Header); err != nil || c.Header.Get("webhook-id") != "n-retry" {
			t.Errorf("attempt %d: Verify = %v, webhook-id %q", i+1, err, c.Header.Get("webhook-id"))
		}
	}
	if a, b := calls[0].Header.Get("webhook-timestamp"), calls[1].Header.Get("webhook-timestamp"); a >= b {
		t.Errorf("retry timestamp %s not after the first attempt's %s", b, a)
	}
}

// During a rotation's grace period a receiver holding only the old secret
// and one holding only the new one both verify; after it, only the new one.
func TestWebhookRotationGracePeriod(t *testing.T) {
	t.Parallel()
	rcv := testkit.NewReceiver(t, nil)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	w, store, _ := signingSetup(t, nil, now, nil)
	oldS, newS := newSecret(t), newSecret(t)
	store(13, webhooksig.Record{Version: 2, Current: newS, Previous: oldS, PreviousUntil: time.Now().Add(time.Hour)})

	send := func(id string) testkit.Call {
		t.Helper()
		n := len(rcv.Calls())
		if out, err := w.Send(context.Background(), signedDue(id, rcv.URL+"/rot", 13, true), "rotating"); err != nil || out.Status != notiflowv1.Status_STATUS_DELIVERED {
			t.Fatalf("send %s: %+v, %v", id, out, err)
		}
		return rcv.Calls()[n]
	}
	c := send("n-grace")
	if got := len(strings.Fields(c.Header.Get("webhook-signature"))); got != 2 {
		t.Errorf("during grace: %d signatures, want 2", got)
	}
	if err := verifier(t, oldS).Verify(c.Raw, c.Header); err != nil {
		t.Errorf("during grace, old-secret receiver: %v", err)
	}
	if err := verifier(t, newS).Verify(c.Raw, c.Header); err != nil {
		t.Errorf("during grace, new-secret receiver: %v", err)
	}

	offset.Store(int64(time.Hour + time.Second)) // the grace period is over
	c = send("n-after")
	if err := verifier(t, oldS).Verify(c.Raw, c.Header); err == nil {
		t.Error("after grace, the old-secret receiver still verifies")
	}
	if err := verifier(t, newS).Verify(c.Raw, c.Header); err != nil {
		t.Errorf("after grace, new-secret receiver: %v", err)
	}
}

// A target without its own secret is signed with every global secret; a
// target's own secret wins over them.
func TestWebhookGlobalSecret(t *testing.T) {
	t.Parallel()
	rcv := testkit.NewReceiver(t, nil)
	g1, g2, own := newSecret(t), newSecret(t), newSecret(t)
	w, store, _ := signingSetup(t, []string{g1, g2}, nil, nil)
	store(15, webhooksig.Record{Version: 1, Current: own})
	for _, d := range []*notiflowv1.NotificationDue{signedDue("n-global", rcv.URL+"/g", 14, false), signedDue("n-own", rcv.URL+"/o", 15, false)} {
		if out, err := w.Send(context.Background(), d, "b"); err != nil || out.Status != notiflowv1.Status_STATUS_DELIVERED {
			t.Fatalf("send %s: %+v, %v", d.NotificationId, out, err)
		}
	}
	calls := rcv.Calls()
	for _, g := range []string{g1, g2} {
		if err := verifier(t, g).Verify(calls[0].Raw, calls[0].Header); err != nil {
			t.Errorf("global secret receiver: %v", err)
		}
		if err := verifier(t, g).Verify(calls[1].Raw, calls[1].Header); err == nil {
			t.Error("a target with its own secret was signed with a global one")
		}
	}
	if err := verifier(t, own).Verify(calls[1].Raw, calls[1].Header); err != nil {
		t.Errorf("own secret receiver: %v", err)
	}
}

// keysHook runs before on the n-th key lookup.
type keysHook struct {
	inner  KeySource
	calls  atomic.Int32
	on     int32
	before func()
}

func (k *keysHook) Keys(ctx context.Context, d *notiflowv1.NotificationDue) ([][]byte, error) {
	if k.calls.Add(1) == k.on {
		k.before()
	}
	return k.inner.Keys(ctx, d)
}

// A target that requires its own secret is never sent while Redis lacks
// it: the lookup is retried (no attempt counted) and the webhook goes out
// signed once the secret appears; when it never does, the outcome is
// FAILED with a dead letter naming the reason, and nothing was sent.
func TestWebhookMissingSecretNotSent(t *testing.T) {
	t.Parallel()
	rcv := testkit.NewReceiver(t, nil)
	secret := newSecret(t)
	w, store, secrets := signingSetup(t, []string{newSecret(t)}, nil, func(o *WebhookOptions) { o.MaxElapsed = 300 * time.Millisecond })

	out, err := w.Send(context.Background(), signedDue("n-missing", rcv.URL+"/m", 16, true), "b")
	if err != nil || out.Status != notiflowv1.Status_STATUS_FAILED || !out.DeadLetter || out.Attempts != 0 ||
		!strings.Contains(out.Err, "signing secret") || !strings.Contains(out.Err, "missing") {
		t.Fatalf("send without secret: %+v, %v; want FAILED, dead letter, 0 attempts, reason naming the missing secret", out, err)
	}
	if n := len(rcv.Calls()); n != 0 {
		t.Fatalf("%d calls made without the required secret", n)
	}

	w.opt.Keys = &keysHook{inner: secrets, on: 2, before: func() { store(16, webhooksig.Record{Version: 1, Current: secret}) }}
	out, err = w.Send(context.Background(), signedDue("n-late", rcv.URL+"/m", 16, true), "b")
	if err != nil || out.Status != notiflowv1.Status_STATUS_DELIVERED || out.Attempts != 1 {
		t.Fatalf("send once the secret appears: %+v, %v; want delivered in 1 attempt", out, err)
	}
	c := rcv.Calls()[0]
	if err := verifier(t, secret).Verify(c.Raw, c.Header); err != nil {
		t.Errorf("late secret: %v", err)
	}
}

// Concurrent sends read their targets' secrets through the batcher (so
// they can share its pipelines), not with a round trip each of their own:
// the batcher must have sent every read.
func TestSecretsReadThroughTheBatcher(t *testing.T) {
	t.Parallel()
	rdb, prefix := testkit.Redis(t)
	size := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "size", Buckets: []float64{1, 8, 64}})
	b := NewBatcher(rdb, 64, 1, 2*time.Second, size)
	testkit.Go(t, b.Run)
	secrets, err := NewSecrets(b, SecretsOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const n = 200
	want := map[uint64]string{}
	for id := uint64(1); id <= n; id++ {
		want[id] = newSecret(t)
		if err := webhooksig.Store(ctx, rdb, prefix, id, webhooksig.Record{Version: 1, Current: want[id]}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for id := uint64(1); id <= n; id++ {
		wg.Go(func() {
			keys, err := secrets.Keys(ctx, &notiflowv1.NotificationDue{TargetId: id, WebhookSecretRequired: true})
			key, _ := webhooksig.Decode(want[id])
			if err != nil || len(keys) != 1 || string(keys[0]) != string(key) {
				t.Errorf("target %d: %d keys, err %v, want its own secret", id, len(keys), err)
			}
		})
	}
	wg.Wait()
	var m dto.Metric
	if err := size.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetHistogram().GetSampleSum(); got != n {
		t.Errorf("the batcher sent %v commands, want the %d secret reads", got, n)
	}
	t.Logf("%d secret reads in %d pipelines", n, m.GetHistogram().GetSampleCount())
}

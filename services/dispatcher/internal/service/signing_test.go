package service

import (
	"context"
	"github.com/notiflow/notiflow/lib/testkit"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/webhooksig"
	"github.com/notiflow/notiflow/services/dispatcher/internal/config"
	"github.com/notiflow/notiflow/services/dispatcher/internal/dispatchtest"
)

// Through the whole dispatcher (Kafka in, Redis secrets, Kafka out): a
// target's webhook is signed with its own secret, one without a secret of
// its own with the global secret, both verified by the specification's
// reference library; a target whose required secret Redis lacks is never
// called and ends FAILED in the DLQ with the reason.
func TestWebhooksSignedEndToEnd(t *testing.T) {
	t.Parallel()
	secret := func() string {
		s, err := webhooksig.Generate()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	own, global := secret(), secret()
	e := newEnv(t, func(c *config.Config) {
		c.WebhookSigningSecrets = []string{global}
		c.WebhookMaxElapsed = 2 * time.Second
	})
	rdb := redis.NewClient(&redis.Options{Addr: e.cfg.RedisAddr})
	t.Cleanup(func() { _ = rdb.Close() })
	rcv := testkit.NewReceiver(t, nil)

	withOwn := dispatchtest.Due("sig-own", "s1", 1, webhook, "bench", rcv.URL+"/own", "")
	withOwn.TargetId, withOwn.WebhookSecretRequired = 101, true
	if err := webhooksig.Store(context.Background(), rdb, e.cfg.RedisPrefix, 101, webhooksig.Record{Version: 1, Current: own}); err != nil {
		t.Fatal(err)
	}
	withGlobal := dispatchtest.Due("sig-global", "s2", 1, webhook, "bench", rcv.URL+"/global", "")
	withGlobal.TargetId = 102
	missing := dispatchtest.Due("sig-missing", "s3", 1, webhook, "bench", rcv.URL+"/missing", "")
	missing.TargetId, missing.WebhookSecretRequired = 103, true
	e.produce(t, withOwn, withGlobal, missing)
	e.start(t)

	rs := byID(e.waitResults(t, 3, 60*time.Second))
	for _, id := range []string{"sig-own", "sig-global"} {
		if r := rs[id]; len(r) != 1 || r[0].Status != delivered {
			t.Fatalf("%s: %v; want one DELIVERED result", id, r)
		}
	}
	if r := rs["sig-missing"]; len(r) != 1 || r[0].Status != failedSt || r[0].Attempts != 0 || !contains(r[0].Error, "missing") {
		t.Fatalf("sig-missing: %v; want FAILED, no attempt, reason naming the missing secret", r)
	}
	calls := map[string]testkit.Call{}
	for _, c := range rcv.Calls() {
		calls[c.Path] = c
	}
	if _, ok := calls["/missing"]; ok || len(calls) != 2 {
		t.Fatalf("calls on %v; want /own and /global only", calls)
	}
	for path, secret := range map[string]string{"/own": own, "/global": global} {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(calls[path].Raw, calls[path].Header); err != nil {
			t.Errorf("%s: reference library rejects the call: %v", path, err)
		}
	}
	dl := e.dlq.WaitLen(t, 1, 30*time.Second)
	if got := header(dl[0].Headers, kafkax.HeaderDLQError); !contains(got, "signing secret") {
		t.Errorf("dlq-error header %q; want the missing secret named", got)
	}
}

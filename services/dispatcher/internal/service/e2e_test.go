package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/dispatcher/internal/adapters"
	"github.com/notiflow/notiflow/services/dispatcher/internal/config"
	"github.com/notiflow/notiflow/services/dispatcher/internal/dispatchtest"
	"github.com/notiflow/notiflow/services/dispatcher/internal/domain"
)

const (
	webhook = notiflowv1.Channel_CHANNEL_WEBHOOK
	sim     = notiflowv1.Channel_CHANNEL_SIM
	inbox   = notiflowv1.Channel_CHANNEL_INBOX

	delivered   = notiflowv1.Status_STATUS_DELIVERED
	failedSt    = notiflowv1.Status_STATUS_FAILED
	duplicate   = notiflowv1.Status_STATUS_DUPLICATE
	rateLimited = notiflowv1.Status_STATUS_RATE_LIMITED
)

// Many recipients, many records each, high concurrency: the results topic
// and the receiver both see every recipient's sequences strictly
// increasing, and every notification is delivered exactly once.
func TestPerRecipientOrderAtHighConcurrency(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.Workers = 256 })
	rcv := testkit.NewReceiver(t, nil)
	const recipients, perRecipient = 200, 15
	var dues []*notiflowv1.NotificationDue
	for s := range perRecipient {
		for r := range recipients {
			rid := fmt.Sprintf("r%d", r)
			dues = append(dues, dispatchtest.Due(fmt.Sprintf("n-%d-%d", r, s), rid, uint64(s+1), webhook, "bench", rcv.URL+"/hook", ""))
		}
	}
	e.produce(t, dues...)
	e.start(t)
	rs := e.waitResults(t, len(dues), 90*time.Second)

	recs, seqs := make([]string, len(rs)), make([]uint64, len(rs))
	for i, r := range rs {
		if r.Status != delivered {
			t.Fatalf("result %s: status %s (%s), want delivered", r.NotificationId, r.Status, r.Error)
		}
		recs[i], seqs[i] = r.RecipientId, r.Sequence
	}
	// Results of one recipient share a partition; Records keeps each
	// partition's offset order.
	if err := dispatchtest.CheckOrder(recs, seqs); err != nil {
		t.Fatalf("results topic: %v", err)
	}
	calls := rcv.Calls()
	if len(calls) != len(dues) {
		t.Fatalf("receiver got %d calls, want %d", len(calls), len(dues))
	}
	recs, seqs = recs[:0], seqs[:0]
	for _, c := range calls {
		if c.IdempotencyKey != c.NotificationID {
			t.Fatalf("Idempotency-Key %q, want the notification id %q", c.IdempotencyKey, c.NotificationID)
		}
		recs, seqs = append(recs, c.RecipientID), append(seqs, c.Sequence)
	}
	if err := dispatchtest.CheckOrder(recs, seqs); err != nil {
		t.Fatalf("receiver: %v", err)
	}
	if len(byID(rs)) != len(dues) {
		t.Fatalf("%d distinct notification ids in results, want %d", len(byID(rs)), len(dues))
	}
}

// The same due event twice: one webhook call, one DELIVERED and one
// DUPLICATE result that remembers the original outcome.
func TestSameEventTwiceIsSentOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rcv := testkit.NewReceiver(t, nil)
	d := dispatchtest.Due("dup-1", "alice", 1, webhook, "welcome", rcv.URL+"/a", "")
	d.ParamsJson = []byte(`{"name":"Alice"}`)
	e.produce(t, d, d)
	e.start(t)
	rs := e.waitResults(t, 2, 60*time.Second)
	if rs[0].Status != delivered || rs[1].Status != duplicate {
		t.Fatalf("statuses %s, %s; want delivered, duplicate", rs[0].Status, rs[1].Status)
	}
	if rs[1].OriginalStatus != delivered || rs[1].Attempts != 1 || rs[1].ProviderCode != http.StatusOK {
		t.Fatalf("duplicate result %+v: want original delivered, 1 attempt, code 200", rs[1])
	}
	if rs[0].Body != "Welcome to notiflow, Alice!" {
		t.Fatalf("body %q", rs[0].Body)
	}
	sum := sha256.Sum256([]byte(domain.BuiltinTemplates()["welcome"]))
	for _, r := range rs {
		if want := hex.EncodeToString(sum[:8]); r.TemplateVersion != want {
			t.Fatalf("template version %q, want %q (the hash of the text rendered)", r.TemplateVersion, want)
		}
	}
	if n := len(rcv.Calls()); n != 1 {
		t.Fatalf("receiver got %d calls, want 1", n)
	}
	if e.dlq.Len() != 0 {
		t.Fatalf("%d dead letters, want 0", e.dlq.Len())
	}
}

// A worker that claimed a notification and died before sending left an
// in-flight marker behind: the notification is still delivered once the
// marker expires.
func TestClaimOfDeadWorkerExpiresAndIsSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rdb, _ := testkit.Redis(t)
	const ttl = 1500 * time.Millisecond
	if err := rdb.Set(context.Background(), adapters.DedupKey(e.cfg.RedisPrefix, "orphan-1"), domain.InflightMarker("dead-owner"), ttl).Err(); err != nil {
		t.Fatalf("plant marker: %v", err)
	}
	planted := time.Now()
	rcv := testkit.NewReceiver(t, nil)
	e.produce(t, dispatchtest.Due("orphan-1", "bob", 1, webhook, "bench", rcv.URL+"/b", ""))
	e.start(t)
	rs := e.waitResults(t, 1, 60*time.Second)
	if rs[0].Status != delivered {
		t.Fatalf("status %s (%s), want delivered", rs[0].Status, rs[0].Error)
	}
	calls := rcv.Calls()
	if len(calls) != 1 {
		t.Fatalf("receiver got %d calls, want 1", len(calls))
	}
	if waited := calls[0].At.Sub(planted); waited < ttl-100*time.Millisecond {
		t.Fatalf("sent %s after the dead claim was planted, before it expired (%s)", waited, ttl)
	}
}

// An unknown template: FAILED result with the reason, and the original
// record in the DLQ with the reason in its headers.
func TestUnknownTemplateFailsToDLQ(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.produce(t, dispatchtest.Due("tpl-1", "carol", 1, sim, "no-such-template", "", ""))
	e.start(t)
	rs := e.waitResults(t, 1, 60*time.Second)
	if rs[0].Status != failedSt || !contains(rs[0].Error, `unknown template "no-such-template"`) {
		t.Fatalf("result %s %q; want failed with the reason", rs[0].Status, rs[0].Error)
	}
	if rs[0].TemplateVersion != "" {
		t.Fatalf("template version %q of an unknown template, want none", rs[0].TemplateVersion)
	}
	dl := e.dlq.WaitLen(t, 1, 30*time.Second)
	if got := header(dl[0].Headers, kafkax.HeaderDLQError); !contains(got, "unknown template") {
		t.Fatalf("dlq-error header %q", got)
	}
	if dl[0].Key != "carol" {
		t.Fatalf("dead letter key %q, want the original key", dl[0].Key)
	}
}

// Over the recipient's rate limit with policy drop: RATE_LIMITED results,
// no send.
func TestRateLimitedResults(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.RateLimit, c.RateWindow, c.RateLimitPolicy = 3, time.Hour, "drop" })
	rcv := testkit.NewReceiver(t, nil)
	var dues []*notiflowv1.NotificationDue
	for i := range 5 {
		dues = append(dues, dispatchtest.Due(fmt.Sprintf("rl-%d", i), "dave", uint64(i+1), webhook, "bench", rcv.URL+"/d", ""))
	}
	dues = append(dues, dispatchtest.Due("rl-other", "erin", 1, webhook, "bench", rcv.URL+"/e", ""))
	e.produce(t, dues...)
	e.start(t)
	rs := e.waitResults(t, len(dues), 60*time.Second)
	count := map[notiflowv1.Status]int{}
	for _, r := range rs {
		if r.RecipientId == "dave" {
			count[r.Status]++
		} else if r.Status != delivered {
			t.Fatalf("erin's result %s, want delivered", r.Status)
		}
	}
	if count[delivered] != 3 || count[rateLimited] != 2 {
		t.Fatalf("dave's results %v, want 3 delivered and 2 rate limited", count)
	}
	if n := len(rcv.Calls()); n != 4 {
		t.Fatalf("receiver got %d calls, want 4", n)
	}
}

// 503 is retried until it succeeds, 429 too, 400 is final and dead
// lettered; inbox delivers without a call and carries the body.
func TestWebhookRetryPolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rcv := testkit.NewReceiver(t, func(c testkit.Call, n int) int {
		switch {
		case c.Path == "/503" && n <= 2:
			return http.StatusServiceUnavailable
		case c.Path == "/429" && n <= 1:
			return http.StatusTooManyRequests
		case c.Path == "/400":
			return http.StatusBadRequest
		}
		return http.StatusOK
	})
	inboxDue := dispatchtest.Due("w-inbox", "u4", 1, inbox, "digest", "", "")
	inboxDue.ParamsJson = []byte(`{"count":3}`)
	e.produce(t,
		dispatchtest.Due("w-503", "u1", 1, webhook, "bench", rcv.URL+"/503", ""),
		dispatchtest.Due("w-429", "u2", 1, webhook, "bench", rcv.URL+"/429", ""),
		dispatchtest.Due("w-400", "u3", 1, webhook, "bench", rcv.URL+"/400", ""),
		inboxDue,
	)
	e.start(t)
	rs := byID(e.waitResults(t, 4, 60*time.Second))
	check := func(id string, st notiflowv1.Status, attempts uint32, code int32) {
		t.Helper()
		r := rs[id][0]
		if r.Status != st || r.Attempts != attempts || r.ProviderCode != code {
			t.Errorf("%s: %s after %d attempt(s), code %d (%s); want %s after %d, code %d",
				id, r.Status, r.Attempts, r.ProviderCode, r.Error, st, attempts, code)
		}
	}
	check("w-503", delivered, 3, 200)
	check("w-429", delivered, 2, 200)
	check("w-400", failedSt, 1, 400)
	check("w-inbox", delivered, 1, 0)
	if b := rs["w-inbox"][0].Body; b != "You have 3 new items since your last visit." {
		t.Errorf("inbox body %q", b)
	}
	dl := e.dlq.WaitLen(t, 1, 30*time.Second)
	if len(dl) != 1 || dl[0].Key != "u3" || !contains(header(dl[0].Headers, kafkax.HeaderDLQError), "HTTP 400") {
		t.Fatalf("dead letters %+v; want only w-400 with its reason", dl)
	}
	perPath := map[string]int{}
	for _, c := range rcv.Calls() {
		perPath[c.Path]++
	}
	if perPath["/503"] != 3 || perPath["/429"] != 2 || perPath["/400"] != 1 {
		t.Fatalf("calls per path %v; want /503:3 /429:2 /400:1", perPath)
	}
}

// A webhook pointing at an address the guard forbids: FAILED with a clear
// reason, dead lettered, and no request is made.
func TestDisallowedWebhookTargetRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.WebhookAllow = nil })
	rcv := testkit.NewReceiver(t, nil)
	e.produce(t,
		dispatchtest.Due("ssrf-1", "m1", 1, webhook, "bench", "http://10.0.0.1/hook", ""),
		dispatchtest.Due("ssrf-2", "m2", 1, webhook, "bench", "http://169.254.169.254/latest/meta-data", ""),
		dispatchtest.Due("ssrf-3", "m3", 1, webhook, "bench", rcv.URL+"/local", ""),
	)
	e.start(t)
	rs := e.waitResults(t, 3, 60*time.Second)
	for _, r := range rs {
		if r.Status != failedSt || !contains(r.Error, "webhook destination refused") || r.Attempts != 0 {
			t.Errorf("%s: %s, %d attempts, %q; want failed, refused, no attempt", r.NotificationId, r.Status, r.Attempts, r.Error)
		}
	}
	e.dlq.WaitLen(t, 3, 30*time.Second)
	if n := len(rcv.Calls()); n != 0 {
		t.Fatalf("receiver got %d calls, want none", n)
	}
}

// A receiver that answers 503 for a while: the breaker opens (the receiver
// is not hammered), records wait within their retry budget, and every
// notification is delivered once the receiver is back, in order per
// recipient.
func TestWebhookOutageThenRecovery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) {
		c.Workers = 16
		c.BreakerFailures = 3
		c.BreakerCooldown = 300 * time.Millisecond
		c.WebhookMaxElapsed = 30 * time.Second
	})
	const outage = 1500 * time.Millisecond
	var mu sync.Mutex
	var downUntil time.Time
	rcv := testkit.NewReceiver(t, func(testkit.Call, int) int {
		mu.Lock()
		defer mu.Unlock()
		if downUntil.IsZero() {
			downUntil = time.Now().Add(outage)
		}
		if time.Now().Before(downUntil) {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	var dues []*notiflowv1.NotificationDue
	for s := range 5 {
		for r := range 10 {
			dues = append(dues, dispatchtest.Due(fmt.Sprintf("out-%d-%d", r, s), fmt.Sprintf("r%d", r), uint64(s+1), webhook, "bench", rcv.URL+"/h", ""))
		}
	}
	e.produce(t, dues...)
	e.start(t)
	rs := e.waitResults(t, len(dues), 90*time.Second)
	for _, r := range rs {
		if r.Status != delivered {
			t.Fatalf("%s: %s (%s), want delivered", r.NotificationId, r.Status, r.Error)
		}
	}
	var recs []string
	var seqs []uint64
	unavailable := 0
	for _, c := range rcv.Calls() {
		if c.Status != http.StatusOK {
			unavailable++
			continue
		}
		recs, seqs = append(recs, c.RecipientID), append(seqs, c.Sequence)
	}
	if len(seqs) != len(dues) {
		t.Fatalf("receiver accepted %d calls, want %d", len(seqs), len(dues))
	}
	if err := dispatchtest.CheckOrder(recs, seqs); err != nil {
		t.Fatalf("receiver order: %v", err)
	}
	// 10 lanes retrying every 20-200 ms for 1.5 s would make ~150 calls
	// without the breaker.
	if unavailable > 40 {
		t.Fatalf("receiver got %d calls while down: the breaker did not hold them back", unavailable)
	}
	t.Logf("%d calls answered 503 during the %s outage", unavailable, outage)
}

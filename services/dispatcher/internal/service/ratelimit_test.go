package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	libconfig "github.com/notiflow/notiflow/lib/config"
	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/dispatcher/internal/adapters"
	"github.com/notiflow/notiflow/services/dispatcher/internal/config"
	"github.com/notiflow/notiflow/services/dispatcher/internal/dispatchtest"
)

// windowOf is the number of the fixed rate window t falls in (the
// dispatcher numbers windows the same way: Unix milliseconds / window).
func windowOf(t time.Time, w time.Duration) int64 { return t.UnixMilli() / w.Milliseconds() }

// awaitWindowStart returns just after the next rate window starts, so that
// what the test does next happens early in a window, far from its end.
func awaitWindowStart(w time.Duration) time.Time {
	start := time.UnixMilli((windowOf(time.Now(), w) + 1) * w.Milliseconds())
	time.Sleep(time.Until(start) + 20*time.Millisecond)
	return start
}

// awaitWindowRoom returns the start of the current rate window when at
// least room is left of it, else waits for the next window and returns its
// start, so that what the test does next happens within one window.
func awaitWindowRoom(w, room time.Duration) time.Time {
	start := time.UnixMilli(windowOf(time.Now(), w) * w.Milliseconds())
	if time.Until(start.Add(w)) >= room {
		return start
	}
	return awaitWindowStart(w)
}

// startWarm starts a dispatcher on e and waits until it handled one record
// of a recipient of its own, so that the group is joined and the next
// records are fetched at once.
func startWarm(t *testing.T, e *env, rcvURL string) (*Service, func()) {
	t.Helper()
	s, stop := e.start(t)
	e.produce(t, dispatchtest.Due("warm-up", "warm-up", 1, webhook, "bench", rcvURL+"/warm", ""))
	e.waitResults(t, 1, 60*time.Second)
	return s, stop
}

// With policy defer and a limit of N per window, 3N notifications of one
// recipient are all delivered, in order, none RATE_LIMITED, and the sends
// are spread over at least three windows with at most N in any one.
func TestRateLimitDeferSendsAllInOrder(t *testing.T) {
	t.Parallel()
	const limit, window = 4, 2 * time.Second
	e := newEnv(t, func(c *config.Config) {
		c.RateLimit, c.RateWindow, c.RateLimitPolicy = limit, window, "defer"
	})
	rcv := testkit.NewReceiver(t, nil)
	s, _ := startWarm(t, e, rcv.URL)

	var dues []*notiflowv1.NotificationDue
	for i := range 3 * limit {
		dues = append(dues, dispatchtest.Due(fmt.Sprintf("def-%d", i), "frank", uint64(i+1), webhook, "bench", rcv.URL+"/f", ""))
	}
	awaitWindowStart(window)
	e.produce(t, dues...)
	rs := e.waitResults(t, 1+len(dues), 60*time.Second)

	var recs []string
	var seqs []uint64
	count := map[notiflowv1.Status]int{}
	for _, r := range rs[1:] {
		count[r.Status]++
		recs, seqs = append(recs, r.RecipientId), append(seqs, r.Sequence)
	}
	if count[delivered] != len(dues) {
		t.Fatalf("frank's results %v, want all %d delivered (none rate limited)", count, len(dues))
	}
	if err := dispatchtest.CheckOrder(recs, seqs); err != nil {
		t.Fatalf("results topic: %v", err)
	}

	var calls []testkit.Call
	for _, c := range rcv.Calls() {
		if c.RecipientID == "frank" {
			calls = append(calls, c)
		}
	}
	if len(calls) != len(dues) {
		t.Fatalf("receiver got %d calls for frank, want %d", len(calls), len(dues))
	}
	recs, seqs = recs[:0], seqs[:0]
	perWindow := map[int64]int{}
	for _, c := range calls {
		recs, seqs = append(recs, c.RecipientID), append(seqs, c.Sequence)
		perWindow[windowOf(c.At, window)]++
	}
	if err := dispatchtest.CheckOrder(recs, seqs); err != nil {
		t.Fatalf("receiver: %v", err)
	}
	for w, n := range perWindow {
		if n > limit {
			t.Fatalf("window %d got %d sends, limit %d (per window: %v)", w, n, limit, perWindow)
		}
	}
	if first, last := windowOf(calls[0].At, window), windowOf(calls[len(calls)-1].At, window); last-first < 2 {
		t.Fatalf("sends spread over windows %d..%d, want at least 3 windows (per window: %v)", first, last, perWindow)
	}
	if n := e.dlq.Len(); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
	if n := metricSum(t, s, "notiflow_dispatcher_rate_deferred_total"); n < 2 {
		t.Fatalf("rate_deferred_total = %v, want at least 2 (one per window waited for)", n)
	}
}

// A deferred record whose wait is cut by a shutdown is neither recorded
// RATE_LIMITED nor dead-lettered and holds no claim while it waits: the
// next dispatcher gets it again and sends it once, in a later window. The
// wait ends as the drain begins: with a window (30s) longer than the drain
// timeout (the default, 15s), the shutdown still returns within 3s.
func TestRateLimitDeferredWaitEndsOnShutdown(t *testing.T) {
	t.Parallel()
	const window = 30 * time.Second
	const prompt = 3 * time.Second
	var def config.Config
	if err := libconfig.FillZero(&def); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *config.Config) {
		c.RateLimit, c.RateWindow, c.RateLimitPolicy = 1, window, "defer"
		c.DrainTimeout, c.ShutdownTimeout = def.DrainTimeout, def.ShutdownTimeout
	})
	rdb, _ := testkit.Redis(t)
	ctx := context.Background()
	rcv := testkit.NewReceiver(t, nil)
	s, stop := startWarm(t, e, rcv.URL)

	start := awaitWindowRoom(window, 15*time.Second)
	e.produce(t,
		dispatchtest.Due("gina-1", "gina", 1, webhook, "bench", rcv.URL+"/g", ""),
		dispatchtest.Due("gina-2", "gina", 2, webhook, "bench", rcv.URL+"/g", ""))
	e.waitResults(t, 2, 30*time.Second)
	testkit.Eventually(t, 10*time.Second, func() error {
		if n := metricSum(t, s, "notiflow_dispatcher_rate_deferred_waiting"); n != 1 {
			return testkit.Errorf("rate_deferred_waiting = %v, want 1 (results so far: %d)", n, e.results.Len())
		}
		return nil
	})
	if n, err := rdb.Exists(ctx, adapters.DedupKey(e.cfg.RedisPrefix, "gina-2")).Result(); err != nil || n != 0 {
		t.Fatalf("dedup key of the deferred record: exists %d (%v), want none while it waits", n, err)
	}

	stopping := time.Now()
	stop()
	if took := time.Since(stopping); took > prompt {
		t.Fatalf("shutdown took %s with a record deferred, want within %s (drain timeout %s)", took.Round(time.Millisecond), prompt, e.cfg.DrainTimeout)
	}
	if stopped, opens := time.Now(), start.Add(window); !stopped.Before(opens) {
		t.Fatalf("shutdown returned at %s, after the window opened at %s: the wait did not end with the drain", stopped, opens)
	}
	if n := metricSum(t, s, "notiflow_dispatcher_rate_deferred_waiting"); n != 0 {
		t.Fatalf("rate_deferred_waiting = %v after the shutdown, want 0", n)
	}
	// Results and dead letters are acknowledged before Run returns.
	for _, tt := range []struct {
		topic      string
		partitions int
		want       int64
	}{
		{e.cfg.Kafka.TopicDispatched, testPartitions, 2}, // warm-up and gina-1
		{e.cfg.Kafka.TopicDLQ, 1, 0},
	} {
		n, err := dispatchtest.EndOffsets(ctx, e.cfg.Kafka.Brokers, tt.topic, tt.partitions)
		if err != nil {
			t.Fatalf("end offsets of %s: %v", tt.topic, err)
		}
		if n != tt.want {
			t.Fatalf("%s holds %d records after the shutdown, want %d", tt.topic, n, tt.want)
		}
	}

	e.start(t)
	rs := e.waitResults(t, 3, 60*time.Second)
	var gina []string
	for _, r := range rs[1:] {
		gina = append(gina, r.NotificationId+" "+r.Status.String())
	}
	if fmt.Sprint(gina) != "[gina-1 STATUS_DELIVERED gina-2 STATUS_DELIVERED]" {
		t.Fatalf("gina's results %v, want gina-1 and gina-2 delivered once each", gina)
	}
	var calls []testkit.Call
	for _, c := range rcv.Calls() {
		if c.RecipientID == "gina" {
			calls = append(calls, c)
		}
	}
	if len(calls) != 2 || calls[0].NotificationID != "gina-1" || calls[1].NotificationID != "gina-2" {
		t.Fatalf("receiver calls for gina %+v, want gina-1 then gina-2, once each", calls)
	}
	if w1, w2 := windowOf(calls[0].At, window), windowOf(calls[1].At, window); w2 <= w1 {
		t.Fatalf("gina-2 sent in window %d, gina-1 in %d: want a later window", w2, w1)
	}
	if n := e.dlq.Len(); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
}

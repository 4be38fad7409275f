package service

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/lib/fence"
	"github.com/notiflow/notiflow/lib/templates"
	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/dispatcher/internal/config"
	"github.com/notiflow/notiflow/services/dispatcher/internal/dispatchtest"
)

// fenced builds a webhook record of target with the given target version.
func fenced(id, recipient string, target, version uint64, url string) *notiflowv1.NotificationDue {
	d := dispatchtest.Due(id, recipient, 1, webhook, "bench", url, "")
	d.TargetId, d.TargetVersion = target, version
	return d
}

func statusByID(rs []*notiflowv1.NotificationDispatched) map[string]notiflowv1.Status {
	out := map[string]notiflowv1.Status{}
	for _, r := range rs {
		out[r.NotificationId] = r.Status
	}
	return out
}

func callsOf(rcv *testkit.Receiver, id string) int {
	n := 0
	for _, c := range rcv.Calls() {
		if c.NotificationID == id {
			n++
		}
	}
	return n
}

// A record claimed under a version below its target's fence is recorded
// CANCELLED and never sent; a record at the fence, and one of a target
// without a fence, are delivered.
func TestFenceCancelsAtTheClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rcv := testkit.NewReceiver(t, nil)
	rdb := redis.NewClient(&redis.Options{Addr: e.cfg.RedisAddr})
	defer rdb.Close()
	ctx := context.Background()
	if err := fence.Raise(ctx, rdb, e.cfg.RedisPrefix, 501, 2); err != nil {
		t.Fatal(err)
	}
	e.start(t)
	e.produce(t, fenced("old", "a", 501, 1, rcv.URL+"/a"), fenced("cur", "b", 501, 2, rcv.URL+"/b"), fenced("other", "c", 502, 0, rcv.URL+"/c"))
	got := statusByID(e.waitResults(t, 3, 60*time.Second))
	want := map[string]notiflowv1.Status{"old": notiflowv1.Status_STATUS_CANCELLED, "cur": notiflowv1.Status_STATUS_DELIVERED, "other": notiflowv1.Status_STATUS_DELIVERED}
	for id, st := range want {
		if got[id] != st {
			t.Errorf("%s: %s, want %s", id, got[id], st)
		}
	}
	if n := callsOf(rcv, "old"); n != 0 {
		t.Errorf("the fenced record reached the receiver %d time(s)", n)
	}
	if n := callsOf(rcv, "cur") + callsOf(rcv, "other"); n != 2 {
		t.Errorf("%d calls for the two open records, want 2", n)
	}
	// The delivered sends ended their registrations with their done
	// markers: nothing of either target is in progress.
	for _, target := range []uint64{501, 502} {
		if n, err := fence.Inflight(ctx, rdb, e.cfg.RedisPrefix, target); err != nil || n != 0 {
			t.Errorf("target %d: %d send(s) still registered in progress (%v)", target, n, err)
		}
	}
	if n := len(e.dlq.Records()); n != 0 {
		t.Errorf("%d dead letters, want none (CANCELLED is final, not a failure)", n)
	}
}

// A change acknowledged while a webhook waits between attempts wins: the
// fence, raised while the receiver answers the first attempt 503, stops
// every later attempt; the record is CANCELLED, the receiver saw one call.
func TestFenceStopsWebhookRetries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) {
		c.WebhookBackoffMin, c.WebhookBackoffMax = 300*time.Millisecond, 300*time.Millisecond
	})
	rdb := redis.NewClient(&redis.Options{Addr: e.cfg.RedisAddr})
	defer rdb.Close()
	ctx := context.Background()
	rcv := testkit.NewReceiver(t, func(c testkit.Call, n int) int {
		if n == 1 {
			// The scheduler acknowledges a delete while this attempt is
			// answered (its fence is written before the 503 goes out).
			if err := fence.Raise(ctx, rdb, e.cfg.RedisPrefix, 601, 4); err != nil {
				t.Error(err)
			}
		}
		return http.StatusServiceUnavailable
	})
	e.start(t)
	e.produce(t, fenced("retry", "a", 601, 3, rcv.URL+"/r"))
	rs := e.waitResults(t, 1, 60*time.Second)
	if rs[0].Status != notiflowv1.Status_STATUS_CANCELLED || rs[0].Attempts != 1 {
		t.Fatalf("result: %s after %d attempt(s) (%s), want CANCELLED after 1", rs[0].Status, rs[0].Attempts, rs[0].Error)
	}
	if n := callsOf(rcv, "retry"); n != 1 {
		t.Fatalf("the receiver saw %d call(s), want 1 (none after the fence)", n)
	}
	if n := len(e.dlq.Records()); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
}

// Fences fail closed. Without the marker of a complete copy (a flushed
// Redis the scheduler has not refilled yet) nothing is sent, fenced or
// not; with Redis unreachable nothing is sent either. Once the copy is
// back, the fenced record is CANCELLED and the other delivered.
func TestFencesFailClosed(t *testing.T) {
	t.Parallel()
	proxy := dispatchtest.NewProxy(t, testkit.RedisAddr(t))
	e := newEnv(t, func(c *config.Config) { c.RedisAddr = proxy.Addr() })
	rcv := testkit.NewReceiver(t, nil)
	rdb := redis.NewClient(&redis.Options{Addr: testkit.RedisAddr(t)})
	defer rdb.Close()
	ctx := context.Background()
	p := e.cfg.RedisPrefix
	if err := fence.Raise(ctx, rdb, p, 701, 2); err != nil {
		t.Fatal(err)
	}
	// Redis lost its copy: fences and marker gone.
	if err := rdb.Del(ctx, fence.SyncedKey(p), fence.Key(p, 701)).Err(); err != nil {
		t.Fatal(err)
	}
	s, _ := e.start(t)
	e.produce(t, fenced("f1", "a", 701, 1, rcv.URL+"/a"), fenced("o1", "b", 702, 1, rcv.URL+"/b"))
	// Both records are fetched and wait (dependency errors rise), none sent.
	testkit.Eventually(t, 30*time.Second, func() error {
		if n := metricSum(t, s, "notiflow_dispatcher_dependency_errors_total"); n < 10 {
			return testkit.Errorf("%v dependency errors so far", n)
		}
		return nil
	})
	// Redis goes away too.
	proxy.Down()
	testkit.Eventually(t, 10*time.Second, func() error {
		if err := s.Ready(ctx); err == nil {
			return testkit.Errorf("still ready with redis down")
		}
		return nil
	})
	before := metricSum(t, s, "notiflow_dispatcher_dependency_errors_total")
	testkit.Eventually(t, 30*time.Second, func() error {
		if n := metricSum(t, s, "notiflow_dispatcher_dependency_errors_total"); n < before+5 {
			return testkit.Errorf("%v dependency errors so far", n)
		}
		return nil
	})
	if n := len(rcv.Calls()); n != 0 || e.results.Len() != 0 {
		t.Fatalf("%d call(s), %d result(s) while the fences could not be judged, want none", n, e.results.Len())
	}
	// Redis back, the scheduler's copy restored.
	proxy.Up(t)
	if err := fence.Raise(ctx, rdb, p, 701, 2); err != nil {
		t.Fatal(err)
	}
	if err := fence.MarkSynced(ctx, rdb, p); err != nil {
		t.Fatal(err)
	}
	got := statusByID(e.waitResults(t, 2, 60*time.Second))
	if got["f1"] != notiflowv1.Status_STATUS_CANCELLED || got["o1"] != notiflowv1.Status_STATUS_DELIVERED {
		t.Fatalf("results: %v, want f1 CANCELLED, o1 DELIVERED", got)
	}
	if callsOf(rcv, "f1") != 0 || callsOf(rcv, "o1") != 1 {
		t.Fatalf("calls: f1 %d, o1 %d, want 0 and 1", callsOf(rcv, "f1"), callsOf(rcv, "o1"))
	}
}

// A send waiting between two webhook attempts is not in progress: a
// change of its target raised during the backoff settles the way the
// scheduler settles it (fence.Raise, then fence.Inflight down to zero)
// well within the backoff, and no attempt reaches the receiver after the
// fence.
func TestFenceSettlesDuringWebhookBackoff(t *testing.T) {
	t.Parallel()
	const backoff = 4 * time.Second
	e := newEnv(t, func(c *config.Config) {
		c.WebhookBackoffMin, c.WebhookBackoffMax = backoff, backoff
	})
	rdb := redis.NewClient(&redis.Options{Addr: e.cfg.RedisAddr})
	defer rdb.Close()
	ctx := context.Background()
	p := e.cfg.RedisPrefix
	rcv := testkit.NewReceiver(t, func(testkit.Call, int) int { return http.StatusServiceUnavailable })
	e.start(t)
	e.produce(t, fenced("backoff", "a", 801, 3, rcv.URL+"/b"))
	// The first attempt was answered 503: the dispatcher is (about to be)
	// in its backoff.
	testkit.Eventually(t, 30*time.Second, func() error {
		if n := callsOf(rcv, "backoff"); n != 1 {
			return testkit.Errorf("%d call(s), want 1", n)
		}
		return nil
	})
	if err := fence.Raise(ctx, rdb, p, 801, 4); err != nil {
		t.Fatal(err)
	}
	raised := time.Now()
	// Half the backoff: the registration, had it stayed, would last the
	// whole backoff; the margin absorbs a busy machine.
	testkit.Eventually(t, backoff/2, func() error {
		if n, err := fence.Inflight(ctx, rdb, p, 801); err != nil || n != 0 {
			return testkit.Errorf("%d send(s) of the target in progress (%v)", n, err)
		}
		return nil
	})
	settled := time.Since(raised)
	rs := e.waitResults(t, 1, 60*time.Second)
	if rs[0].Status != notiflowv1.Status_STATUS_CANCELLED || rs[0].Attempts != 1 {
		t.Fatalf("result: %s after %d attempt(s) (%s), want CANCELLED after 1", rs[0].Status, rs[0].Attempts, rs[0].Error)
	}
	if n := callsOf(rcv, "backoff"); n != 1 {
		t.Fatalf("the receiver saw %d call(s), want 1 (none after the fence, settled in %s)", n, settled)
	}
	if n := len(e.dlq.Records()); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
}

// A record whose managed template was deleted (as a target's delete may
// take its template along) is CANCELLED, not FAILED, when its target's
// fence stands above it: nothing dead-lettered. The same record of a
// target without a fence still fails with the reason and a dead letter.
func TestFenceCancelsARecordWhoseTemplateIsGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rcv := testkit.NewReceiver(t, nil)
	rdb := redis.NewClient(&redis.Options{Addr: e.cfg.RedisAddr})
	defer rdb.Close()
	ctx := context.Background()
	p := e.cfg.RedisPrefix
	tpl := templates.Template{Name: "gone", Body: "Hi {{.n}}", Params: []string{"n"}, Version: 1}
	if err := templates.Store(ctx, rdb, p, tpl); err != nil {
		t.Fatal(err)
	}
	tpl.Version, tpl.Deleted = 2, true
	if err := templates.Store(ctx, rdb, p, tpl); err != nil {
		t.Fatal(err)
	}
	if err := fence.Raise(ctx, rdb, p, 901, 2); err != nil {
		t.Fatal(err)
	}
	cut, open := fenced("cut", "a", 901, 1, rcv.URL+"/a"), fenced("open", "b", 902, 1, rcv.URL+"/b")
	cut.TemplateId, open.TemplateId = "gone", "gone"
	e.start(t)
	e.produce(t, cut, open)
	rs := byID(e.waitResults(t, 2, 60*time.Second))
	if r := rs["cut"]; len(r) != 1 || r[0].Status != notiflowv1.Status_STATUS_CANCELLED {
		t.Fatalf("fenced record: %v, want one CANCELLED result", r)
	}
	if r := rs["open"]; len(r) != 1 || r[0].Status != notiflowv1.Status_STATUS_FAILED || !contains(r[0].Error, "gone") {
		t.Fatalf("unfenced record: %v, want one FAILED result naming the template", r)
	}
	// Both results are out, so are the dead letters written before them.
	if n, err := dispatchtest.EndOffsets(ctx, e.cfg.Kafka.Brokers, e.cfg.Kafka.TopicDLQ, 1); err != nil || n != 1 {
		t.Fatalf("%d dead letter(s) (%v), want 1 (the unfenced record's)", n, err)
	}
	if dl := e.dlq.WaitLen(t, 1, 30*time.Second); dl[0].Key != "b" {
		t.Fatalf("dead letter of key %q, want the unfenced record's (b)", dl[0].Key)
	}
	if n := len(rcv.Calls()); n != 0 {
		t.Errorf("%d call(s), want none", n)
	}
}

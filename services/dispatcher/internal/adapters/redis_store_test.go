package adapters

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/lib/simsend"
	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/dispatcher/internal/domain"
)

func testStore(t *testing.T, opt StoreOptions) (*Store, *redis.Client, prometheus.Histogram) {
	t.Helper()
	rdb, prefix := testkit.Redis(t)
	size := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "size", Buckets: []float64{1, 2, 8, 64}})
	b := NewBatcher(rdb, 64, 2, 2*time.Second, size)
	testkit.Go(t, b.Run)
	opt.Prefix = prefix
	if opt.InflightTTL == 0 {
		opt.InflightTTL = 10 * time.Second
	}
	if opt.DoneTTL == 0 {
		opt.DoneTTL = time.Hour
	}
	return NewStore(rdb, b, opt), rdb, size
}

func TestStoreClaimStates(t *testing.T) {
	t.Parallel()
	s, rdb, _ := testStore(t, StoreOptions{InflightTTL: 3 * time.Second})
	ctx := context.Background()
	now := time.Now()
	claim := func(id, token string) domain.Claim {
		t.Helper()
		c, err := s.Claim(ctx, id, "rcp", token, now)
		if err != nil {
			t.Fatalf("Claim(%s, %s): %v", id, token, err)
		}
		return c
	}
	if c := claim("n1", "t1"); c.State != domain.Claimed {
		t.Fatalf("first claim: %+v", c)
	}
	if c := claim("n1", "t1"); c.State != domain.Claimed {
		t.Fatalf("same token again: %+v, want claimed (a retried call is idempotent)", c)
	}
	if c := claim("n1", "t2"); c.State != domain.Busy || c.Owner != "t1" {
		t.Fatalf("other token: %+v, want busy, owner t1", c)
	}
	ttl := rdb.PTTL(ctx, s.dedupKey("n1")).Val()
	if ttl <= 0 || ttl > 3*time.Second {
		t.Fatalf("in-flight TTL %s, want at most 3s", ttl)
	}
	if err := s.Extend(ctx, "n1", "t1"); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if err := s.Extend(ctx, "n1", "t2"); !errors.Is(err, domain.ErrClaimLost) {
		t.Fatalf("Extend by a non-owner: %v, want ErrClaimLost", err)
	}
	claim("n9", "t9")
	if lost, err := s.ExtendMany(ctx, map[string]string{"n1": "t1", "n9": "t9", "n404": "t1"}); err != nil || lost != 1 {
		t.Fatalf("ExtendMany: lost %d, %v; want 1 lost (n404)", lost, err)
	}
	out := domain.Outcome{Status: notiflowv1.Status_STATUS_DELIVERED, Attempts: 2, ProviderCode: 201}
	if err := s.MarkDone(ctx, "n1", out); err != nil {
		t.Fatalf("MarkDone: %v", err)
	}
	c := claim("n1", "t3")
	if c.State != domain.Duplicate || c.Previous.Status != out.Status || c.Previous.Attempts != 2 || c.Previous.ProviderCode != 201 {
		t.Fatalf("after done: %+v, want duplicate remembering the outcome", c)
	}
	if ttl := rdb.PTTL(ctx, s.dedupKey("n1")).Val(); ttl < 59*time.Minute {
		t.Fatalf("done TTL %s, want the dedup TTL", ttl)
	}

	// Release only drops our own claim.
	claim("n2", "t1")
	if err := s.Release(ctx, "n2", "t2"); err != nil {
		t.Fatalf("Release by a non-owner: %v", err)
	}
	if c := claim("n2", "t2"); c.State != domain.Busy {
		t.Fatalf("after a foreign release: %+v, want still busy", c)
	}
	if err := s.Release(ctx, "n2", "t1"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if c := claim("n2", "t2"); c.State != domain.Claimed {
		t.Fatalf("after release: %+v, want claimable", c)
	}

	// An unreadable marker is reported, not waited on.
	rdb.Set(ctx, s.dedupKey("n3"), "garbage", time.Minute)
	if _, err := s.Claim(ctx, "n3", "rcp", "t1", now); !errors.Is(err, domain.ErrBadMarker) {
		t.Fatalf("garbage marker: %v, want ErrBadMarker", err)
	}
}

func TestStoreRateLimitFixedWindow(t *testing.T) {
	t.Parallel()
	s, _, _ := testStore(t, StoreOptions{RateLimit: 2, RateWindow: time.Hour, RatePolicy: domain.RateDrop})
	ctx := context.Background()
	now := time.Now()
	var got []domain.ClaimState
	for i := range 4 {
		c, err := s.Claim(ctx, fmt.Sprintf("n%d", i), "alice", "t", now)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, c.State)
	}
	want := []domain.ClaimState{domain.Claimed, domain.Claimed, domain.RateLimited, domain.RateLimited}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("states %v, want %v", got, want)
	}
	// A rate-limited notification is remembered: its redelivery is a
	// duplicate of the rate-limited outcome, not judged again.
	c, _ := s.Claim(ctx, "n2", "alice", "t9", now)
	if c.State != domain.Duplicate || c.Previous.Status != notiflowv1.Status_STATUS_RATE_LIMITED {
		t.Fatalf("redelivered rate-limited record: %+v", c)
	}
	// Another recipient has its own budget; the next window starts fresh.
	if c, _ := s.Claim(ctx, "b1", "bob", "t", now); c.State != domain.Claimed {
		t.Fatalf("bob: %+v", c)
	}
	if c, _ := s.Claim(ctx, "n5", "alice", "t", now.Add(time.Hour)); c.State != domain.Claimed {
		t.Fatalf("next window: %+v", c)
	}
}

// Concurrent callers share pipelines, and each gets its own reply.
func TestBatcherSharesPipelines(t *testing.T) {
	t.Parallel()
	s, rdb, size := testStore(t, StoreOptions{})
	ctx := context.Background()
	const callers = 200
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() {
			key := s.opt.Prefix + fmt.Sprintf("k%d", i)
			set := redis.NewStatusCmd(ctx, "set", key, i)
			get := redis.NewStringCmd(ctx, "get", key)
			if err := s.b.Do(ctx, set, get); err != nil {
				errs <- err
				return
			}
			if get.Val() != fmt.Sprint(i) {
				errs <- fmt.Errorf("caller %d got %q", i, get.Val())
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n := testutil.CollectAndCount(size)
	sum := histogramSum(t, size)
	if n == 0 || sum != 2*callers {
		t.Fatalf("pipelines observed: %d, commands %v; want %d commands", n, sum, 2*callers)
	}
	if pipelines := histogramCount(t, size); pipelines >= callers {
		t.Fatalf("%d pipelines for %d concurrent callers: nothing was batched", pipelines, callers)
	}
	_ = rdb
}

func TestSimSendsCounted(t *testing.T) {
	t.Parallel()
	s, rdb, _ := testStore(t, StoreOptions{})
	ctx := context.Background()
	for range 2 {
		if err := s.RecordSimSend(ctx, "run1", "7:123"); err != nil {
			t.Fatal(err)
		}
	}
	key := simsend.Key(s.opt.Prefix, "run1")
	if v := rdb.HGet(ctx, key, "7:123").Val(); v != "2" {
		t.Fatalf("count %q, want 2", v)
	}
	if ttl := rdb.TTL(ctx, key).Val(); ttl < 23*time.Hour {
		t.Fatalf("TTL %s, want a day", ttl)
	}
}

// When Redis is gone the batcher fails the commands and merged parts
// promptly (no hang) and stops cleanly.
func TestBatcherRedisDown(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	b := NewBatcher(rdb, 16, 1, time.Second, nil)
	run := testkit.Go(t, b.Run)
	cmd := redis.NewStatusCmd(context.Background(), "ping")
	if err := b.Do(context.Background(), cmd); err != nil {
		t.Fatalf("Do: %v", err)
	}
	if cmd.Err() == nil {
		t.Fatal("ping through a closed port succeeded")
	}
	m := &mgetMerger{entered: make(chan struct{}), gate: make(chan struct{})}
	close(m.gate)
	part := &mgetPart{key: "k"}
	if err := b.DoMerged(context.Background(), m, part); err != nil {
		t.Fatalf("DoMerged: %v", err)
	}
	if part.err == nil {
		t.Fatal("a merged part through a closed port got no error")
	}
	if err := run.Stop(); err != nil {
		t.Fatalf("batcher Run: %v", err)
	}
	if err := b.Do(context.Background(), redis.NewStatusCmd(context.Background(), "ping")); !errors.Is(err, ErrBatcherClosed) {
		t.Fatalf("Do after stop: %v, want ErrBatcherClosed", err)
	}
	if err := b.DoMerged(context.Background(), m, &mgetPart{key: "k"}); !errors.Is(err, ErrBatcherClosed) {
		t.Fatalf("DoMerged after stop: %v, want ErrBatcherClosed", err)
	}
}

// Policy defer: over the limit nothing is written (no marker, the counter
// not raised) and the answer says when the next window opens; there the
// same notification is claimed.
func TestStoreRateLimitDefer(t *testing.T) {
	t.Parallel()
	const window = time.Hour
	s, rdb, _ := testStore(t, StoreOptions{RateLimit: 2, RateWindow: window, RatePolicy: domain.RateDefer})
	ctx := context.Background()
	start := time.UnixMilli(time.Now().UnixMilli() / window.Milliseconds() * window.Milliseconds())
	now := start.Add(17 * time.Minute)
	claim := func(id string, at time.Time) domain.Claim {
		t.Helper()
		c, err := s.Claim(ctx, id, "alice", "t-"+id, at)
		if err != nil {
			t.Fatalf("Claim(%s): %v", id, err)
		}
		return c
	}
	for _, id := range []string{"n0", "n1"} {
		if c := claim(id, now); c.State != domain.Claimed {
			t.Fatalf("%s: %+v, want claimed", id, c)
		}
	}
	for range 3 { // asking again changes nothing
		c := claim("n2", now)
		if c.State != domain.Deferred || !c.RetryAt.Equal(start.Add(window)) {
			t.Fatalf("over the limit: %+v, want deferred until %s", c, start.Add(window))
		}
	}
	if n := rdb.Exists(ctx, s.dedupKey("n2")).Val(); n != 0 {
		t.Fatal("a deferred notification has a dedup marker; want none (a crash must leave it claimable)")
	}
	if c := claim("n3", now); c.State != domain.Deferred {
		t.Fatalf("another notification in the full window: %+v, want deferred", c)
	}
	if c := claim("n2", start.Add(window)); c.State != domain.Claimed {
		t.Fatalf("at the next window: %+v, want claimed", c)
	}
	if c := claim("n2", start.Add(window)); c.State != domain.Claimed {
		t.Fatalf("claimed again by the same token: %+v, want claimed", c)
	}
	if c, err := s.Claim(ctx, "n2", "alice", "other", start.Add(window)); err != nil || c.State != domain.Busy {
		t.Fatalf("claimed by another token: %+v, %v; want busy", c, err)
	}
}

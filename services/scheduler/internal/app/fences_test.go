package app_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/lib/fence"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/scheduler/internal/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// fenceOf reads target id's fence in Redis (0: none).
func fenceOf(t *testing.T, rdb *redis.Client, prefix string, id int64) uint64 {
	t.Helper()
	v, err := rdb.Get(context.Background(), fence.Key(prefix, uint64(id))).Uint64()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A change returns only once its fence is in Redis and no send of the
// target registered before it is still in progress; a send that does not
// end within the wait gives ErrFenceNotSettled (the change stands, the
// fence stays), and a repeat of the request settles again. A sender that
// checks after the fence is refused.
func TestChangesSettleTheirFence(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	store := e.store(t)
	rdb, prefix := testkit.Redis(t)
	ctx := context.Background()
	if err := fence.MarkSynced(ctx, rdb, prefix); err != nil {
		t.Fatal(err)
	}
	targets := app.NewTargets(store, domain.Limits{MaxParamsBytes: 1024}, 100, nil)
	fences := app.NewFences(store, adapters.NewFenceCache(rdb, prefix), app.FencesOptions{Wait: 300 * time.Millisecond, Poll: 5 * time.Millisecond}, testLogger(t))
	targets.UseFences(fences)
	due := time.Now().Add(time.Hour)
	tg, err := targets.Create(ctx, webhookInput("a", due))
	if err != nil {
		t.Fatal(err)
	}
	id := uint64(tg.ID)

	// Nothing in flight: the pause settles at once, fence = version 2.
	p, err := targets.Pause(ctx, tg.ID)
	if err != nil || p.Version != 2 || fenceOf(t, rdb, prefix, tg.ID) != 2 {
		t.Fatalf("pause: %+v %v, fence %d", p, err, fenceOf(t, rdb, prefix, tg.ID))
	}
	// A record claimed under version 1 is refused from now on.
	if v, err := fence.Enter(ctx, rdb, prefix, id, 1, "late", 5000); err != nil || v != fence.Fenced {
		t.Fatalf("a sender after the pause: %q %v, want fenced", v, err)
	}

	// A send in progress (registered under the current version) holds the
	// resume until it ends.
	if v, err := fence.Enter(ctx, rdb, prefix, id, 2, "sending", 60000); err != nil || v != fence.Open {
		t.Fatalf("register a send: %q %v", v, err)
	}
	ended := make(chan time.Time, 1)
	go func() {
		time.Sleep(100 * time.Millisecond) // the send's duration, not a synchronisation
		ended <- time.Now()
		_ = fence.Exit(ctx, rdb, prefix, id, "sending")
	}()
	r, err := targets.Resume(ctx, tg.ID)
	acked := time.Now()
	if err != nil || r.Version != 3 {
		t.Fatalf("resume: %+v %v", r, err)
	}
	if end := <-ended; acked.Before(end) {
		t.Fatalf("resume acknowledged at %s, before the send in progress ended at %s", acked, end)
	}

	// A send that never ends within the wait: ErrFenceNotSettled, the
	// change and the fence stand; after it ends a retry settles.
	if v, err := fence.Enter(ctx, rdb, prefix, id, 3, "stuck", 60000); err != nil || v != fence.Open {
		t.Fatalf("register a send: %q %v", v, err)
	}
	if err := targets.Delete(ctx, tg.ID); !errors.Is(err, app.ErrFenceNotSettled) {
		t.Fatalf("delete with a send stuck: %v, want ErrFenceNotSettled", err)
	}
	if fenceOf(t, rdb, prefix, tg.ID) != 4 {
		t.Fatalf("fence after the unsettled delete: %d, want 4", fenceOf(t, rdb, prefix, tg.ID))
	}
	if _, err := targets.Get(ctx, tg.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("the delete did not stand: %v", err)
	}
	if err := targets.Delete(ctx, tg.ID); !errors.Is(err, app.ErrFenceNotSettled) {
		t.Fatalf("repeat delete with the send still stuck: %v, want ErrFenceNotSettled", err)
	}
	if err := fence.Exit(ctx, rdb, prefix, id, "stuck"); err != nil {
		t.Fatal(err)
	}
	if err := targets.Delete(ctx, tg.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("repeat delete once settled: %v, want ErrNotFound (after settling)", err)
	}

	// Redis unreachable: the change stands, the answer says not settled.
	tg2, err := targets.Create(ctx, webhookInput("b", due))
	if err != nil {
		t.Fatal(err)
	}
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer down.Close()
	other := app.NewTargets(store, domain.Limits{MaxParamsBytes: 1024}, 100, nil)
	other.UseFences(app.NewFences(store, adapters.NewFenceCache(down, prefix), app.FencesOptions{Wait: 300 * time.Millisecond}, nil))
	_, err = other.Pause(ctx, tg2.ID)
	if !errors.Is(err, app.ErrFenceNotSettled) {
		t.Fatalf("pause with redis down: %v, want ErrFenceNotSettled", err)
	}
	// The cause is wrapped too: a caller can tell a network failure.
	var nerr net.Error
	if !errors.As(err, &nerr) {
		t.Fatalf("pause with redis down: %v (%T) does not wrap its network error", err, errors.Unwrap(err))
	}
	if got, _ := targets.Get(ctx, tg2.ID); got.Status != domain.StatusPaused {
		t.Fatalf("the pause did not stand: %s", got.Status)
	}
}

// Run copies every fence to Redis and only then sets the marker; after
// Redis lost them (marker included) it copies them again; a change whose
// own write failed reaches Redis at a later pass.
func TestFencesSyncHeals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	store := e.store(t)
	rdb, prefix := testkit.Redis(t)
	ctx := context.Background()
	// Changes made with Redis unreachable: only MySQL has them.
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer down.Close()
	targets := app.NewTargets(store, domain.Limits{MaxParamsBytes: 1024}, 100, nil)
	targets.UseFences(app.NewFences(store, adapters.NewFenceCache(down, prefix), app.FencesOptions{Wait: 100 * time.Millisecond}, nil))
	due := time.Now().Add(time.Hour)
	var changed []int64
	for _, r := range []string{"a", "b", "c"} {
		tg, err := targets.Create(ctx, webhookInput(r, due))
		if err != nil {
			t.Fatal(err)
		}
		changed = append(changed, tg.ID)
	}
	untouched, err := targets.Create(ctx, webhookInput("d", due))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = targets.Pause(ctx, changed[0])
	_, _ = targets.Pause(ctx, changed[1])
	_, _ = targets.Resume(ctx, changed[1])
	_ = targets.Delete(ctx, changed[2])
	want := map[int64]uint64{changed[0]: 2, changed[1]: 3, changed[2]: 2}

	fences := app.NewFences(store, adapters.NewFenceCache(rdb, prefix), app.FencesOptions{Wait: time.Second, SyncEvery: 100 * time.Millisecond}, testLogger(t))
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- fences.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	synced := func() error {
		ok, err := fence.Synced(ctx, rdb, prefix)
		if err != nil || !ok {
			return testkit.Errorf("marker: %v %v", ok, err)
		}
		for id, v := range want {
			if got := fenceOf(t, rdb, prefix, id); got != v {
				return testkit.Errorf("target %d: fence %d, want %d", id, got, v)
			}
		}
		return nil
	}
	testkit.Eventually(t, 10*time.Second, synced)
	if got := fenceOf(t, rdb, prefix, untouched.ID); got != 0 {
		t.Errorf("a target never changed has fence %d", got)
	}

	// Redis loses everything under the prefix, marker included.
	keys, _ := rdb.Keys(ctx, prefix+"*").Result()
	if len(keys) == 0 || rdb.Del(ctx, keys...).Err() != nil {
		t.Fatalf("flush %d keys", len(keys))
	}
	testkit.Eventually(t, 10*time.Second, synced)

	// A later change whose own write failed: the incremental pass copies it.
	if _, err := targets.Pause(ctx, untouched.ID); !errors.Is(err, app.ErrFenceNotSettled) {
		t.Fatalf("pause with redis down: %v", err)
	}
	want[untouched.ID] = 2
	testkit.Eventually(t, 10*time.Second, synced)
}

package app_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/lib/webhooksig"
	"github.com/notiflow/notiflow/services/scheduler/internal/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

func webhookInput(recipient string, due time.Time) app.TargetInput {
	return app.TargetInput{RecipientID: recipient, Channel: string(domain.ChannelWebhook), WebhookURL: "http://example.com/h",
		TemplateID: "welcome", Params: []byte(`{}`), DueAt: &due}
}

// createWebhookTargets creates one webhook target, due in an hour, per
// recipient, each with its own secret.
func createWebhookTargets(t *testing.T, targets *app.Targets, recipients ...string) []domain.Target {
	t.Helper()
	due := time.Now().Add(time.Hour)
	var made []domain.Target
	for _, r := range recipients {
		tg, err := targets.Create(context.Background(), webhookInput(r, due))
		if err != nil || tg.WebhookSecret == "" {
			t.Fatalf("create: %+v, %v", tg, err)
		}
		made = append(made, tg)
	}
	return made
}

// unreachableSecrets is another replica's secrets service whose Redis
// cannot be reached: its writes to Redis after a commit fail.
func unreachableSecrets(t *testing.T, store app.SecretStore, prefix string) *app.WebhookSecrets {
	t.Helper()
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = down.Close() })
	return app.NewWebhookSecrets(store, adapters.NewSecretCache(down, prefix), app.WebhookSecretsOptions{Grace: time.Hour}, nil)
}

// The due record of a target with its own secret says so; that of a
// target without one does not.
func TestDueRecordSaysSecretRequired(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	in := e.instance(t, instanceOpts{})
	c := e.consume(t)
	ctx := context.Background()
	now := time.Now()
	if _, err := in.targets.Create(ctx, webhookInput("signed", now)); err != nil {
		t.Fatal(err)
	}
	inbox := webhookInput("inbox", now)
	inbox.Channel, inbox.WebhookURL = string(domain.ChannelInbox), ""
	if _, err := in.targets.Create(ctx, inbox); err != nil {
		t.Fatal(err)
	}
	stop := in.run(t)
	defer func() { _ = stop() }()
	c.waitDistinct(t, 2, 30*time.Second)
	for id := range c.ids() {
		r := c.records(id)[0]
		if want := r.recipient == "signed"; r.secretRequired != want {
			t.Errorf("%s: webhook_secret_required = %v, want %v", r.recipient, r.secretRequired, want)
		}
	}
}

// Run copies the secrets of live targets to Redis at start, again after
// Redis lost them (flush), and picks up a rotation whose own write to
// Redis failed (another replica's, here one with Redis unreachable).
func TestWebhookSecretsSyncHeals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	store := e.store(t)
	rdb, prefix := testkit.Redis(t)
	targets := app.NewTargets(store, domain.Limits{MaxParamsBytes: 1024}, 100, nil)
	ctx := context.Background()
	live := createWebhookTargets(t, targets, "a", "b", "c")
	gone := createWebhookTargets(t, targets, "gone")[0]
	if err := targets.Delete(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}

	ws := app.NewWebhookSecrets(store, adapters.NewSecretCache(rdb, prefix), app.WebhookSecretsOptions{Grace: time.Hour, SyncEvery: 100 * time.Millisecond}, testLogger(t))
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ws.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	inRedis := func(want map[int64]string) func() error {
		return func() error {
			for id, secret := range want {
				rec, ok, err := webhooksig.Load(ctx, rdb, prefix, uint64(id))
				if err != nil || !ok || rec.Current != secret {
					return testkit.Errorf("target %d: ok=%v err=%v current matches=%v", id, ok, err, rec.Current == secret)
				}
			}
			return nil
		}
	}
	want := map[int64]string{}
	for _, tg := range live {
		want[tg.ID] = tg.WebhookSecret
	}
	testkit.Eventually(t, 10*time.Second, inRedis(want))
	if _, ok, _ := webhooksig.Load(ctx, rdb, prefix, uint64(gone.ID)); ok {
		t.Error("a deleted target's secret was synced")
	}

	// Redis loses everything under the prefix, marker included.
	keys, _ := rdb.Keys(ctx, prefix+"*").Result()
	if len(keys) == 0 || rdb.Del(ctx, keys...).Err() != nil {
		t.Fatalf("flush %d keys", len(keys))
	}
	testkit.Eventually(t, 10*time.Second, inRedis(want))

	other := unreachableSecrets(t, store, prefix)
	rec, err := other.Rotate(ctx, live[0].ID)
	if err != nil || rec.Previous != live[0].WebhookSecret || rec.Version != 2 {
		t.Fatalf("rotate: %+v, %v", rec, err)
	}
	want[live[0].ID] = rec.Current
	testkit.Eventually(t, 10*time.Second, inRedis(want))
	got, _, _ := webhooksig.Load(ctx, rdb, prefix, uint64(live[0].ID))
	if got.Previous != live[0].WebhookSecret || !got.PreviousUntil.Equal(rec.PreviousUntil) {
		t.Errorf("synced rotation: previous matches=%v until %v, want %v", got.Previous == live[0].WebhookSecret, got.PreviousUntil, rec.PreviousUntil)
	}

	if _, err := other.Rotate(ctx, 1<<40); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("rotate of a missing target: %v, want ErrNotFound", err)
	}
}

// A sync pass writes only what Redis lacks or holds at an older version:
// the records a bulk create wrote a moment ago are read, not written
// again, and one Redis lost is written back.
func TestWebhookSecretsSyncWritesOnlyWhatRedisLacks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	store := e.store(t)
	rdb, prefix := testkit.Redis(t)
	ctx := context.Background()
	ws := app.NewWebhookSecrets(store, adapters.NewSecretCache(rdb, prefix), app.WebhookSecretsOptions{Grace: time.Hour}, testLogger(t))
	targets := app.NewTargets(store, domain.Limits{MaxParamsBytes: 1024}, 100, nil)
	targets.UseSecrets(ws)
	made := createWebhookTargets(t, targets, "kept", "lost", "rotated")
	kept, lost, rotated := made[0], made[1], made[2]
	for _, tg := range made {
		if rec, ok, err := webhooksig.Load(ctx, rdb, prefix, uint64(tg.ID)); err != nil || !ok || rec.Current != tg.WebhookSecret {
			t.Fatalf("target %d not in redis after its create: ok=%v err=%v", tg.ID, ok, err)
		}
	}
	// A record that is written again loses this field's value.
	if err := rdb.HSet(ctx, webhooksig.RedisKey(prefix, uint64(kept.ID)), "cur", "in place").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, webhooksig.RedisKey(prefix, uint64(lost.ID))).Err(); err != nil {
		t.Fatal(err)
	}
	rot, err := unreachableSecrets(t, store, prefix).Rotate(ctx, rotated.ID) // its own write to Redis fails
	if err != nil {
		t.Fatal(err)
	}

	if err := ws.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[int64]string{kept.ID: "in place", lost.ID: lost.WebhookSecret, rotated.ID: rot.Current} {
		rec, ok, err := webhooksig.Load(ctx, rdb, prefix, uint64(id))
		if err != nil || !ok || rec.Current != want {
			t.Errorf("target %d after the sync: ok=%v err=%v, current is the expected one: %v", id, ok, err, rec.Current == want)
		}
	}
}

// runSyncedTargets runs the secrets' sync (a pass every 50 ms, a full one
// at least every fullEvery) over store and cache until the test ends, and
// returns targets (stored in targetStore) whose secrets reach Redis
// through it.
func runSyncedTargets(t *testing.T, store app.SecretStore, targetStore *adapters.MySQLStore, cache app.SecretCache, fullEvery time.Duration) *app.Targets {
	t.Helper()
	ws := app.NewWebhookSecrets(store, cache, app.WebhookSecretsOptions{Grace: time.Hour, SyncEvery: 50 * time.Millisecond, FullEvery: fullEvery}, testLogger(t))
	targets := app.NewTargets(targetStore, domain.Limits{MaxParamsBytes: 1024}, 100, nil)
	targets.UseSecrets(ws)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ws.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return targets
}

// countingSecretStore counts the sync passes (each reads the database
// clock once) of the real store it wraps.
type countingSecretStore struct {
	*adapters.MySQLStore
	passes atomic.Int64
}

func (s *countingSecretStore) DBNow(ctx context.Context) (time.Time, error) {
	s.passes.Add(1)
	return s.MySQLStore.DBNow(ctx)
}

// countingSecretCache counts the records the real cache it wraps is
// asked to check and refresh.
type countingSecretCache struct {
	*adapters.SecretCache
	refreshed atomic.Int64
}

func (c *countingSecretCache) Refresh(ctx context.Context, recs map[int64]webhooksig.Record) error {
	c.refreshed.Add(int64(len(recs)))
	return c.SecretCache.Refresh(ctx, recs)
}

// An incremental pass reads and checks in Redis each version of a record
// once: the records a create just wrote, and a rotation once picked up,
// are not read and checked again on every pass of the sync's window.
func TestWebhookSecretsPassChecksEachVersionOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	store := &countingSecretStore{MySQLStore: e.store(t)}
	rdb, prefix := testkit.Redis(t)
	cache := &countingSecretCache{SecretCache: adapters.NewSecretCache(rdb, prefix)}
	targets := runSyncedTargets(t, store, store.MySQLStore, cache, time.Hour)
	ctx := context.Background()
	passesAtLeast := func(n int64) func() error {
		return func() error {
			if got := store.passes.Load(); got < n {
				return testkit.Errorf("%d passes, waiting for %d", got, n)
			}
			return nil
		}
	}
	testkit.Eventually(t, 10*time.Second, passesAtLeast(2)) // the full pass at start is over
	before := cache.refreshed.Load()

	made := createWebhookTargets(t, targets, "a", "b", "c")
	rot, err := unreachableSecrets(t, store.MySQLStore, prefix).Rotate(ctx, made[0].ID) // its own write to Redis fails
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		rec, ok, err := webhooksig.Load(ctx, rdb, prefix, uint64(made[0].ID))
		if err != nil || !ok || rec.Version != rot.Version {
			return testkit.Errorf("rotated record in redis: ok=%v err=%v version %d, want %d", ok, err, rec.Version, rot.Version)
		}
		return nil
	})
	testkit.Eventually(t, 10*time.Second, passesAtLeast(store.passes.Load()+4))

	// Four versions were written (three creates, one rotation); a pass
	// may have caught a create between its commit and its own write to
	// Redis, so each was checked at most once, the rotation at least once.
	if got := cache.refreshed.Load() - before; got < 1 || got > 4 {
		t.Errorf("the passes checked %d records in redis, want 1 to 4 (each version once)", got)
	}
}

// readFeed reads the whole change feed, page pages of entries at a time.
func readFeed(t *testing.T, store *adapters.MySQLStore, page int) []app.SecretChange {
	t.Helper()
	var all []app.SecretChange
	at, after := time.Time{}, int64(0)
	for range 100 {
		got, err := store.SecretChanges(context.Background(), at, after, page)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, got...)
		if len(got) < page {
			return all
		}
		at, after = got[len(got)-1].UpdatedAt, got[len(got)-1].TargetID
	}
	t.Fatalf("the feed did not end within 100 pages: %d entries", len(all))
	return nil
}

// The change feed lists every record's version in (updated_at, target
// id) order from a cursor, deleted targets' included, and pages through
// records stamped at one instant; SecretsOf reads the records of live
// targets only.
func TestSecretChangesFeed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	store := e.store(t)
	targets := app.NewTargets(store, domain.Limits{MaxParamsBytes: 1024}, 100, nil)
	ctx := context.Background()
	var ids []int64
	for _, tg := range createWebhookTargets(t, targets, "a", "b", "c") {
		ids = append(ids, tg.ID)
	}
	rdb, prefix := testkit.Redis(t)
	ws := app.NewWebhookSecrets(store, adapters.NewSecretCache(rdb, prefix), app.WebhookSecretsOptions{Grace: time.Hour}, nil)
	if _, err := ws.Rotate(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := targets.Delete(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}

	all := readFeed(t, store, 2)
	order := []int64{ids[1], ids[2], ids[0]} // the rotation moved ids[0] last
	if len(all) != len(order) {
		t.Fatalf("feed: %+v, want targets %v", all, order)
	}
	for i, c := range all {
		want := int64(1)
		if c.TargetID == ids[0] {
			want = 2
		}
		if c.TargetID != order[i] || c.Version != want {
			t.Errorf("feed[%d] = target %d version %d, want target %d version %d", i, c.TargetID, c.Version, order[i], want)
		}
		if i > 0 && c.UpdatedAt.Before(all[i-1].UpdatedAt) {
			t.Errorf("feed[%d] updated %v before feed[%d]'s %v", i, c.UpdatedAt, i-1, all[i-1].UpdatedAt)
		}
	}
	recs, err := store.SecretsOf(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := recs[ids[1]]; ok || len(recs) != 2 || recs[ids[0]].Version != 2 || recs[ids[2]].Version != 1 {
		t.Errorf("SecretsOf = %+v, want ids %d (version 2) and %d (version 1) only", recs, ids[0], ids[2])
	}

	// A bulk create stamps its records alike: the cursor pages through
	// them by target id.
	due := time.Now().Add(time.Hour)
	var ins []app.TargetInput
	for _, r := range []string{"d", "e", "f", "g", "h"} {
		ins = append(ins, webhookInput(r, due))
	}
	made, err := targets.CreateBulk(ctx, ins)
	if err != nil {
		t.Fatal(err)
	}
	got := readFeed(t, store, 2)[len(all):]
	if len(got) != len(made) {
		t.Fatalf("feed has %d entries after the bulk create, want %d: %+v", len(got), len(made), got)
	}
	for i, c := range got {
		if c.TargetID != made[i].ID || !c.UpdatedAt.Equal(got[0].UpdatedAt) {
			t.Errorf("bulk feed[%d] = target %d at %v, want target %d at %v", i, c.TargetID, c.UpdatedAt, made[i].ID, got[0].UpdatedAt)
		}
	}
}

// switchedSecretCache is the real cache, except that the Redis server it
// reports can be made to change (what a restart or a failover does).
type switchedSecretCache struct {
	*adapters.SecretCache
	switched atomic.Bool
}

func (c *switchedSecretCache) Server(ctx context.Context) (string, error) {
	id, err := c.SecretCache.Server(ctx)
	if c.switched.Load() {
		id = "another " + id
	}
	return id, err
}

// A record Redis lost while its marker survived (a failover or a restart
// from an older snapshot: another server answers) is written back: the
// next pass is a full one.
func TestWebhookSecretsResyncOnAnotherServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	store := e.store(t)
	rdb, prefix := testkit.Redis(t)
	real := adapters.NewSecretCache(rdb, prefix)
	first, err := real.Server(context.Background())
	if again, err2 := real.Server(context.Background()); err != nil || err2 != nil || first == "" || again != first {
		t.Fatalf("server: %q then %q (%v, %v), want one run id", first, again, err, err2)
	}
	cache := &switchedSecretCache{SecretCache: real}
	targets := runSyncedTargets(t, store, store, cache, time.Hour)
	ctx := context.Background()

	tg := createWebhookTargets(t, targets, "a")[0]
	key := webhooksig.RedisKey(prefix, uint64(tg.ID))
	inRedis := func() error {
		rec, ok, err := webhooksig.Load(ctx, rdb, prefix, uint64(tg.ID))
		if err != nil || !ok || rec.Current != tg.WebhookSecret {
			return testkit.Errorf("target %d: ok=%v err=%v", tg.ID, ok, err)
		}
		return nil
	}
	testkit.Eventually(t, 10*time.Second, inRedis)
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	cache.switched.Store(true)
	testkit.Eventually(t, 10*time.Second, inRedis)
}

// A record Redis lost on its own, its server running on (a DEL, an
// eviction), is written back by the next full copy, due FullEvery after
// the last; the incremental passes, which saw it in Redis, skip it.
func TestWebhookSecretsFullCopyEveryFullEvery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	store := &countingSecretStore{MySQLStore: e.store(t)}
	rdb, prefix := testkit.Redis(t)
	targets := runSyncedTargets(t, store, store.MySQLStore, adapters.NewSecretCache(rdb, prefix), 300*time.Millisecond)
	ctx := context.Background()
	tg := createWebhookTargets(t, targets, "a")[0]
	inRedis := func() error {
		if _, ok, err := webhooksig.Load(ctx, rdb, prefix, uint64(tg.ID)); err != nil || !ok {
			return testkit.Errorf("target %d: ok=%v err=%v", tg.ID, ok, err)
		}
		return nil
	}
	testkit.Eventually(t, 10*time.Second, inRedis)
	// Two whole passes after the create: the record is known to be in
	// Redis, so only a full copy can write it back.
	after := store.passes.Load() + 3
	testkit.Eventually(t, 10*time.Second, func() error {
		if got := store.passes.Load(); got < after {
			return testkit.Errorf("%d passes, waiting for %d", got, after)
		}
		return nil
	})
	if err := rdb.Del(ctx, webhooksig.RedisKey(prefix, uint64(tg.ID))).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, inRedis)
}

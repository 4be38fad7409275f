package app_test

import (
	"context"
	"errors"
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
	due := time.Now().Add(time.Hour)
	var live []domain.Target
	for _, r := range []string{"a", "b", "c"} {
		tg, err := targets.Create(ctx, webhookInput(r, due))
		if err != nil || tg.WebhookSecret == "" {
			t.Fatalf("create: %+v, %v", tg, err)
		}
		live = append(live, tg)
	}
	gone, err := targets.Create(ctx, webhookInput("gone", due))
	if err != nil {
		t.Fatal(err)
	}
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

	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer down.Close()
	other := app.NewWebhookSecrets(store, adapters.NewSecretCache(down, prefix), app.WebhookSecretsOptions{Grace: time.Hour}, nil)
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
	due := time.Now().Add(time.Hour)
	var made []domain.Target
	for _, r := range []string{"kept", "lost", "rotated"} {
		tg, err := targets.Create(ctx, webhookInput(r, due))
		if err != nil || tg.WebhookSecret == "" {
			t.Fatalf("create: %+v, %v", tg, err)
		}
		made = append(made, tg)
	}
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
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer down.Close()
	other := app.NewWebhookSecrets(store, adapters.NewSecretCache(down, prefix), app.WebhookSecretsOptions{Grace: time.Hour}, nil)
	rot, err := other.Rotate(ctx, rotated.ID) // its own write to Redis fails
	if err != nil {
		t.Fatal(err)
	}

	if err := ws.Sync(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[int64]string{kept.ID: "in place", lost.ID: lost.WebhookSecret, rotated.ID: rot.Current} {
		rec, ok, err := webhooksig.Load(ctx, rdb, prefix, uint64(id))
		if err != nil || !ok || rec.Current != want {
			t.Errorf("target %d after the sync: ok=%v err=%v, current is the expected one: %v", id, ok, err, rec.Current == want)
		}
	}
}

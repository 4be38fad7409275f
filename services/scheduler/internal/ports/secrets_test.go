package ports_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/webhooksig"
)

const webhookBody = `{"recipient_id":"u1","channel":"webhook","webhook_url":"https://example.com/h","template_id":"t1","cron":"@daily"}`

func (s *server) redisRecord(t *testing.T, id int64) (webhooksig.Record, bool) {
	t.Helper()
	rec, ok, err := webhooksig.Load(context.Background(), s.rdb, s.prefix, uint64(id))
	if err != nil {
		t.Fatal(err)
	}
	return rec, ok
}

type createdWebhook struct {
	ID            int64  `json:"id"`
	WebhookSecret string `json:"webhook_secret"`
}

// createWebhook creates a webhook target and returns its id and secret.
func (s *server) createWebhook(t *testing.T) createdWebhook {
	t.Helper()
	r := s.call(t, "POST", "/v1/targets", webhookBody)
	var created createdWebhook
	if err := json.Unmarshal(r.body, &created); err != nil || r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	return created
}

// A webhook target's secret is in the create answer and in Redis, and
// nowhere in later reads; other channels get none.
func TestWebhookSecretReturnedOnce(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	created := s.createWebhook(t)
	if _, err := webhooksig.Decode(created.WebhookSecret); err != nil {
		t.Fatalf("create answer's webhook_secret: %v", err)
	}
	if rec, ok := s.redisRecord(t, created.ID); !ok || rec.Current != created.WebhookSecret || rec.Version != 1 {
		t.Errorf("redis record: ok=%v version %d, current matches=%v", ok, rec.Version, rec.Current == created.WebhookSecret)
	}
	for _, path := range []string{fmt.Sprintf("/v1/targets/%d", created.ID), "/v1/targets"} {
		g := s.call(t, "GET", path, "")
		if g.code != 200 || strings.Contains(string(g.body), "webhook_secret") || strings.Contains(string(g.body), created.WebhookSecret) {
			t.Errorf("GET %s shows the secret: %d %s", path, g.code, g.body)
		}
	}
	inbox := s.call(t, "POST", "/v1/targets", `{"recipient_id":"u1","channel":"inbox","template_id":"t1","cron":"@daily"}`)
	if inbox.code != 201 || strings.Contains(string(inbox.body), "webhook_secret") {
		t.Errorf("inbox create: %d %s; want no webhook_secret", inbox.code, inbox.body)
	}
}

// A bulk create answers the webhook targets' secrets aligned with the
// ids, null for the other channels.
func TestBulkWebhookSecrets(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	inbox := `{"recipient_id":"u2","channel":"inbox","template_id":"t1","cron":"@daily"}`
	r := s.call(t, "POST", "/v1/targets:bulk", `{"targets":[`+webhookBody+`,`+inbox+`,`+webhookBody+`]}`)
	var resp struct {
		IDs            []int64   `json:"ids"`
		WebhookSecrets []*string `json:"webhook_secrets"`
	}
	if err := json.Unmarshal(r.body, &resp); err != nil || r.code != 201 || len(resp.IDs) != 3 || len(resp.WebhookSecrets) != 3 {
		t.Fatalf("bulk: %d %s", r.code, r.body)
	}
	if resp.WebhookSecrets[1] != nil || resp.WebhookSecrets[0] == nil || resp.WebhookSecrets[2] == nil || *resp.WebhookSecrets[0] == *resp.WebhookSecrets[2] {
		t.Fatalf("webhook_secrets %v; want two distinct secrets around a null", resp.WebhookSecrets)
	}
	for _, i := range []int{0, 2} {
		if rec, ok := s.redisRecord(t, resp.IDs[i]); !ok || rec.Current != *resp.WebhookSecrets[i] {
			t.Errorf("target %d: redis record ok=%v, matches=%v", resp.IDs[i], ok, rec.Current == *resp.WebhookSecrets[i])
		}
	}
	if _, ok := s.redisRecord(t, resp.IDs[1]); ok {
		t.Error("an inbox target has a secret in redis")
	}
}

// Rotation answers the new secret once, keeps the former one valid for
// the grace period (in MySQL's record and Redis'), and refuses targets
// that cannot have a secret.
func TestRotateWebhookSecret(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	created := s.createWebhook(t)
	type rotated struct {
		TargetID           int64     `json:"target_id"`
		WebhookSecret      string    `json:"webhook_secret"`
		PreviousValidUntil time.Time `json:"previous_valid_until"`
	}
	rotate := func(prev string) rotated {
		t.Helper()
		r := s.call(t, "POST", fmt.Sprintf("/v1/targets/%d/webhook-secret:rotate", created.ID), "")
		var got rotated
		if err := json.Unmarshal(r.body, &got); err != nil || r.code != 200 {
			t.Fatalf("rotate: %d %s", r.code, r.body)
		}
		if _, err := webhooksig.Decode(got.WebhookSecret); err != nil || got.WebhookSecret == prev || got.TargetID != created.ID {
			t.Fatalf("rotate answer %+v: %v", got, err)
		}
		if want := s.clock.Now().Add(24 * time.Hour); !got.PreviousValidUntil.Equal(want) {
			t.Errorf("previous_valid_until %s, want %s (the grace period after now)", got.PreviousValidUntil, want)
		}
		rec, ok := s.redisRecord(t, created.ID)
		if !ok || rec.Current != got.WebhookSecret || rec.Previous != prev || !rec.PreviousUntil.Equal(got.PreviousValidUntil) {
			t.Errorf("redis record after rotation: ok=%v current ok=%v previous ok=%v until %s", ok, rec.Current == got.WebhookSecret, rec.Previous == prev, rec.PreviousUntil)
		}
		return got
	}
	first := rotate(created.WebhookSecret)
	s.clock.Add(time.Hour)
	rotate(first.WebhookSecret)

	g := s.call(t, "GET", fmt.Sprintf("/v1/targets/%d", created.ID), "")
	if strings.Contains(string(g.body), "webhook_secret") {
		t.Errorf("GET after rotation shows a secret: %s", g.body)
	}
	inbox := decodeTarget(t, s.call(t, "POST", "/v1/targets", `{"recipient_id":"u1","channel":"inbox","template_id":"t1","cron":"@daily"}`))
	if r := s.call(t, "POST", fmt.Sprintf("/v1/targets/%d/webhook-secret:rotate", inbox.ID), ""); r.code != 409 || !strings.Contains(r.errMsg(), "channel inbox has no webhook secret") {
		t.Errorf("rotate an inbox target: %d %s; want 409 naming the channel", r.code, r.body)
	}
	if r := s.call(t, "DELETE", fmt.Sprintf("/v1/targets/%d", created.ID), ""); r.code != 204 {
		t.Fatalf("delete: %d", r.code)
	}
	if r := s.call(t, "POST", fmt.Sprintf("/v1/targets/%d/webhook-secret:rotate", created.ID), ""); r.code != 404 {
		t.Errorf("rotate a deleted target: %d %s; want 404", r.code, r.body)
	}
}

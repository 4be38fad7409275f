package ports_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/webhooksig"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
)

// TestWebhookRunSharesItsSecret starts a webhook run with a secret of its
// own: every target gets the run's URL and that secret, which the run's
// stored params and answers never show.
func TestWebhookRunSharesItsSecret(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{lead: time.Hour, webhookAllow: []string{"127.0.0.1/32"}})
	ctx := context.Background()
	secret, err := webhooksig.Generate()
	if err != nil {
		t.Fatal(err)
	}
	body := `{"notifications":25,"recipients":5,"channel":"webhook","webhook_url":"http://127.0.0.1:9/hook","webhook_secret":"` + secret + `"}`
	r := e.do(t, http.MethodPost, "/admin/benchmarks", bearer, body)
	if r.code != http.StatusCreated {
		t.Fatalf("POST: %d %s", r.code, r.body)
	}
	if strings.Contains(string(r.body), secret) || strings.Contains(string(r.body), "webhook_secret") {
		t.Fatalf("the answer shows the secret: %s", r.body)
	}
	var started domain.Run
	if err := json.Unmarshal(r.body, &started); err != nil {
		t.Fatal(err)
	}
	run := e.get(t, started.ID)
	if run.Params.Channel != domain.ChannelWebhook || run.Params.WebhookURL != "http://127.0.0.1:9/hook" || run.Params.WebhookSecret != "" {
		t.Fatalf("stored params = %+v", run.Params)
	}
	var stored string
	if err := e.db.DB().QueryRowContext(ctx, `SELECT params FROM benchmark_runs WHERE id = ?`, run.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, secret) {
		t.Fatalf("the run's stored params hold the secret: %s", stored)
	}
	rows, err := e.db.DB().QueryContext(ctx, `SELECT t.channel, t.webhook_url, w.secret FROM notification_targets t
		LEFT JOIN webhook_secrets w ON w.target_id = t.id WHERE t.run_id = ?`, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var channel, url string
		var got *string
		if err := rows.Scan(&channel, &url, &got); err != nil {
			t.Fatal(err)
		}
		if channel != "webhook" || url != "http://127.0.0.1:9/hook" || got == nil || *got != secret {
			t.Fatalf("target: channel %q, url %q, secret is the run's: %v", channel, url, got != nil && *got == secret)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 25 {
		t.Fatalf("%d targets, want 25", n)
	}
	var first, last int64
	if err := e.db.DB().QueryRowContext(ctx, `SELECT MIN(id), MAX(id) FROM notification_targets WHERE run_id = ?`, run.ID).Scan(&first, &last); err != nil {
		t.Fatal(err)
	}
	if r := e.do(t, http.MethodDelete, "/admin/benchmarks/"+run.ID, bearer, ""); r.code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", r.code, r.body)
	}
	// The run's secrets went with its targets.
	var left int
	if err := e.db.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM webhook_secrets WHERE target_id BETWEEN ? AND ?`, first, last).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d webhook secrets of the run's targets left after DELETE", left)
	}
}

// TestWebhookRunWithoutSecret: each target gets a secret of its own, as
// the API's webhook targets do.
func TestWebhookRunWithoutSecret(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{lead: time.Hour, webhookAllow: []string{"127.0.0.1/32"}})
	run := e.start(t, `{"notifications":4,"recipients":2,"channel":"webhook","webhook_url":"http://127.0.0.1:9/hook"}`)
	var distinct, n int
	if err := e.db.DB().QueryRowContext(context.Background(), `SELECT COUNT(DISTINCT w.secret), COUNT(*) FROM notification_targets t
		JOIN webhook_secrets w ON w.target_id = t.id WHERE t.run_id = ?`, run.ID).Scan(&distinct, &n); err != nil {
		t.Fatal(err)
	}
	if distinct != 4 || n != 4 {
		t.Fatalf("%d distinct secrets over %d targets, want 4 and 4", distinct, n)
	}
	if r := e.do(t, http.MethodDelete, "/admin/benchmarks/"+run.ID, bearer, ""); r.code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", r.code, r.body)
	}
}

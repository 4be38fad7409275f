package service

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

// TestReadAPIServesWhatTheSinkStored: in-app results consumed from Kafka
// are readable on the sink's own HTTP server (next to /readyz), newest
// first, counted unread, and only with the bearer token.
func TestReadAPIServesWhatTheSinkStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	cfg := e.config(t)
	start(t, cfg)
	var evs []*notiflowv1.NotificationDispatched
	for i := range 3 {
		ev := e.result(i)
		ev.RecipientId, ev.Channel = "inbox-user", notiflowv1.Channel_CHANNEL_INBOX
		evs = append(evs, ev)
	}
	e.produce(t, evs...)
	e.waitRows(t, 3, 30*time.Second)

	get := func(path, auth string) (int, []byte) {
		req, err := http.NewRequest(http.MethodGet, "http://"+cfg.HTTPAddr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b
	}
	if code, body := get("/v1/recipients/inbox-user/inbox", ""); code != http.StatusUnauthorized {
		t.Fatalf("without the token: %d %s, want 401", code, body)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		code, body := get("/v1/recipients/inbox-user/inbox/unread_count", testToken)
		if code != http.StatusOK || string(body) != "{\"unread\":3}\n" {
			return testkit.Errorf("unread_count: %d %s", code, body)
		}
		return nil
	})
	code, body := get("/v1/recipients/inbox-user/inbox?limit=2", testToken)
	var p struct {
		Notifications []struct {
			NotificationID string `json:"notification_id"`
			Channel        string `json:"channel"`
		} `json:"notifications"`
		NextCursor string `json:"next_cursor"`
	}
	if err := json.Unmarshal(body, &p); code != http.StatusOK || err != nil {
		t.Fatalf("inbox: %d %s %v", code, body, err)
	}
	if len(p.Notifications) != 2 || p.NextCursor == "" || p.Notifications[0].Channel != "inbox" {
		t.Fatalf("first page of 2 of 3 inbox rows: %s", body)
	}
}

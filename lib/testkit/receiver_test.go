package testkit

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

func post(t *testing.T, url, body string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Idempotency-Key", "k1")
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0 // no answer
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestReceiver(t *testing.T) {
	t.Parallel()
	r := NewReceiver(t, func(c Call, n int) int {
		if c.Path == "/flaky" && n == 1 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	call := `{"notification_id":"n1","recipient_id":"u1","sequence":7}`
	for _, tt := range []struct {
		name, path, body string
		failing, hanging bool
		want             int
	}{
		{name: "ok", path: "/a", body: call, want: 200},
		{name: "first call on a path fails", path: "/flaky", body: call, want: 500},
		{name: "second call on it succeeds", path: "/flaky", body: call, want: 200},
		{name: "failing", path: "/a", body: call, failing: true, want: 503},
		{name: "hanging", path: "/a", body: call, hanging: true, want: 0},
		{name: "not json", path: "/a", body: "nope", want: 400},
	} {
		r.SetFailing(tt.failing)
		r.SetHanging(tt.hanging)
		if got := post(t, r.URL+tt.path, tt.body); got != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, got, tt.want)
		}
	}
	r.SetHanging(false)
	if r.Held() != 1 {
		t.Errorf("held %d requests, want 1", r.Held())
	}
	var statuses []int
	countCalls := func() error {
		statuses = statuses[:0]
		for _, c := range r.Calls() {
			statuses = append(statuses, c.Status)
		}
		if len(statuses) != 5 {
			return Errorf("%d calls recorded (%v), want 5 (the bad body is not recorded)", len(statuses), statuses)
		}
		return nil
	}
	Eventually(t, 5*time.Second, countCalls) // the held call is recorded once released
	first := r.Calls()[0]
	if first.NotificationID != "n1" || first.RecipientID != "u1" || first.Sequence != 7 || first.IdempotencyKey != "k1" || first.Path != "/a" {
		t.Errorf("first call %+v", first)
	}
	if want := []int{200, 500, 200, 503, 503}; !slices.Equal(statuses, want) {
		t.Errorf("recorded statuses %v, want %v (a held call counts as 503)", statuses, want)
	}
}

func TestGoStopReturnsTheError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	b := Go(t, func(ctx context.Context) error { <-ctx.Done(); return boom })
	select {
	case <-b.Done():
		t.Fatal("returned before Stop")
	default:
	}
	if err := b.Stop(); !errors.Is(err, boom) {
		t.Fatalf("Stop: %v, want %v", err, boom)
	}
	if err := b.Stop(); !errors.Is(err, boom) {
		t.Fatalf("second Stop: %v, want the same error", err)
	}
	if !errors.Is(b.Err(), boom) {
		t.Fatalf("Err: %v", b.Err())
	}
	// The cleanup would report boom; the test has checked it, so clear it.
	b.stop = nil
}

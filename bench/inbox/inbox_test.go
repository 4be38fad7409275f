package inbox

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

// TestSpecEvents: the heavy recipient gets exactly HeavyItems inbox rows,
// every row has its own notification id and target, and the others are
// spread over Recipients recipients.
func TestSpecEvents(t *testing.T) {
	t.Parallel()
	s := Spec{Rows: 10_000, HeavyItems: 1_000, Recipients: 37, Spacing: time.Millisecond}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	heavy, ids, others := 0, map[string]bool{}, map[string]bool{}
	for i := 0; i < s.Rows; i++ {
		ev := s.Event(i)
		if ids[ev.NotificationId] || ev.TargetId != uint64(i+1) {
			t.Fatalf("row %d: id %s target %d repeated or out of order", i, ev.NotificationId, ev.TargetId)
		}
		ids[ev.NotificationId] = true
		if ev.RecipientId == HeavyRecipient {
			heavy++
			if ev.Channel != notiflowv1.Channel_CHANNEL_INBOX {
				t.Fatalf("heavy row %d on channel %s", i, ev.Channel)
			}
			continue
		}
		others[ev.RecipientId] = true
	}
	if heavy != s.HeavyItems || len(others) != s.Recipients {
		t.Errorf("%d heavy rows and %d other recipients, want %d and %d", heavy, len(others), s.HeavyItems, s.Recipients)
	}
	for _, bad := range []Spec{{}, {Rows: 10, HeavyItems: 11, Recipients: 1, Spacing: 1}, {Rows: 10, HeavyItems: 1, Recipients: 1}} {
		if bad.Validate() == nil {
			t.Errorf("%+v: valid, want an error", bad)
		}
	}
}

// TestLoadDrivesAServer runs a tiny attack on a real HTTP server and
// checks that every request arrived with the token and was counted.
func TestLoadDrivesAServer(t *testing.T) {
	t.Parallel()
	var hits, authed atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get("Authorization") == "Bearer tok" {
			authed.Add(1)
			_, _ = w.Write([]byte(`{"notifications":[]}`))
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	res, err := Load(context.Background(), LoadSpec{URL: srv.URL + "/inbox", Token: "tok", Rate: 50, For: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 50 || hits.Load() != 50 || authed.Load() != 50 {
		t.Errorf("requests %d, server saw %d (%d with the token), want 50", res.Requests, hits.Load(), authed.Load())
	}
	if res.Success != 1 || res.Codes["200"] != 50 || res.LatencyMs.P99 <= 0 || res.LatencyMs.Max < res.LatencyMs.P50 {
		t.Errorf("summary %+v", res)
	}
	res, err = Load(context.Background(), LoadSpec{URL: srv.URL + "/inbox", Rate: 20, For: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Success != 0 || res.Codes["401"] != 10 {
		t.Errorf("without a token: %+v, want 10 answers 401", res)
	}
}

// TestCountPacerSendsWhatIsOwedAfterTheDuration: the pacer ends an attack
// by its count of hits, not by the clock, so hits that fall behind on a
// busy machine are still sent after the attack's duration has passed.
func TestCountPacerSendsWhatIsOwedAfterTheDuration(t *testing.T) {
	t.Parallel()
	p := countPacer{ConstantPacer: vegeta.ConstantPacer{Freq: 50, Per: time.Second}, total: 50}
	if wait, stop := p.Pace(0, 0); stop || wait != 20*time.Millisecond {
		t.Errorf("first hit: wait %s, stop %v; want 20ms, false", wait, stop)
	}
	if wait, stop := p.Pace(1500*time.Millisecond, 49); stop || wait != 0 {
		t.Errorf("50th hit half a second late: wait %s, stop %v; want it sent at once", wait, stop)
	}
	if _, stop := p.Pace(1500*time.Millisecond, 50); !stop {
		t.Error("after 50 hits: not stopped")
	}
	if _, stop := p.Pace(0, 50); !stop {
		t.Error("after 50 hits, early: not stopped")
	}
}

// TestRequestsRoundsUp: an attack sends rate × duration requests, a whole
// product exactly, a fractional one rounded up.
func TestRequestsRoundsUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rate int
		d    time.Duration
		want uint64
	}{
		{50, time.Second, 50},
		{50, 580 * time.Millisecond, 29}, // 50 × 0.58 s in float64 is 28.999…
		{45, 1400 * time.Millisecond, 63},
		{3, 500 * time.Millisecond, 2},
		{1, 100 * time.Millisecond, 1},
		{1000, 30 * time.Second, 30_000},
		{0, time.Second, 0},
		{10, 0, 0},
	} {
		if got := Requests(tc.rate, tc.d); got != tc.want {
			t.Errorf("Requests(%d, %s) = %d, want %d", tc.rate, tc.d, got, tc.want)
		}
	}
}

package adapters

import (
	"context"
	"sync"
	"testing"
	"time"

	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

type memRecorder struct {
	mu    sync.Mutex
	sends map[string]int
}

func (m *memRecorder) RecordSimSend(_ context.Context, runID, field string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sends[runID+"/"+field]++
	return nil
}

func TestSim(t *testing.T) {
	t.Parallel()
	rec := &memRecorder{sends: map[string]int{}}
	s := &Sim{Latency: time.Millisecond, Recorder: rec, BackoffMin: time.Millisecond, BackoffMax: time.Millisecond}
	due := &notiflowv1.NotificationDue{NotificationId: "n", TargetId: 7, OccurrenceAtUs: 99, RunId: "run", ParamsJson: []byte(`{"_sim_latency_ms":30}`)}
	start := time.Now()
	out, err := s.Send(context.Background(), due, "b")
	if err != nil || out.Status != notiflowv1.Status_STATUS_DELIVERED || out.ProviderCode != 200 {
		t.Fatalf("Send: %+v, %v", out, err)
	}
	if el := time.Since(start); el < 30*time.Millisecond {
		t.Fatalf("per-record latency override ignored: took %s", el)
	}
	if rec.sends["run/7:99"] != 1 {
		t.Fatalf("sends recorded: %v", rec.sends)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Send(ctx, due, "b"); err == nil {
		t.Fatal("Send with an ended context succeeded")
	}
	if rec.sends["run/7:99"] != 1 {
		t.Fatalf("an abandoned send was recorded: %v", rec.sends)
	}
	failing := &Sim{FailureRate: 1}
	out, _ = failing.Send(context.Background(), &notiflowv1.NotificationDue{}, "b")
	if out.Status != notiflowv1.Status_STATUS_FAILED || !out.DeadLetter {
		t.Fatalf("failure rate 1: %+v", out)
	}
	out, _ = Inbox{}.Send(context.Background(), due, "b")
	if out.Status != notiflowv1.Status_STATUS_DELIVERED {
		t.Fatalf("inbox: %+v", out)
	}
}

// Each record's latency comes from its own params, whatever the params
// of the record before (the decoded params are cached), also under
// concurrent use.
func TestSimLatencyFollowsEachRecordsParams(t *testing.T) {
	t.Parallel()
	s := &Sim{Latency: 5 * time.Millisecond}
	cases := []struct {
		params string
		want   time.Duration
	}{
		{`{"_sim_latency_ms":30}`, 30 * time.Millisecond},
		{`{"_sim_latency_ms":30}`, 30 * time.Millisecond},
		{`{"name":"x"}`, 5 * time.Millisecond},
		{`{"_sim_latency_ms":0.5}`, 500 * time.Microsecond},
		{`{"_sim_latency_ms":-1}`, 5 * time.Millisecond},
		{`{"_sim_latency_ms":"7"}`, 5 * time.Millisecond},
		{`{"_sim_latency_ms":0}`, 0},
		{`{"_sim_latency_ms":`, 5 * time.Millisecond},
		{`{"_sim_latency_ms":30}`, 30 * time.Millisecond},
		{``, 5 * time.Millisecond},
	}
	for _, tc := range cases {
		if got := s.latency([]byte(tc.params)); got != tc.want {
			t.Errorf("latency(%s) = %s, want %s", tc.params, got, tc.want)
		}
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				tc := cases[(g+i)%len(cases)]
				if got := s.latency([]byte(tc.params)); got != tc.want {
					t.Errorf("concurrent latency(%s) = %s, want %s", tc.params, got, tc.want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkSimLatency: a benchmark run's record params decoded for every
// record (decode) against the cached decoding Send uses (cached).
func BenchmarkSimLatency(b *testing.B) {
	params := []byte(`{"_sim_latency_ms":2}`)
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			if _, ok := parseSimLatency(params); !ok {
				b.Fatal("not decoded")
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		s := &Sim{}
		for b.Loop() {
			if s.latency(params) != 2*time.Millisecond {
				b.Fatal("wrong latency")
			}
		}
	})
}

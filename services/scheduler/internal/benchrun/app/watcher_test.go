package app

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	schedulerapp "github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
)

// countingFakes stand in for the watcher's sources (pure pacing logic):
// every count takes countTook and is counted; the lag and the outbox say
// what settled says.
type countingFakes struct {
	mu                    sync.Mutex
	countTook             time.Duration
	outboxCalls, rowCalls int
	settled               bool
	eligible              int64
}

// fakeOutbox, fakeRows and fakeLag are countingFakes as each source.
type (
	fakeOutbox struct {
		Targets
		*countingFakes
	}
	fakeRows struct {
		Persisted
		*countingFakes
	}
	fakeLag struct {
		LagSampler
		*countingFakes
	}
)

func (f fakeOutbox) SampleOutbox(context.Context, domain.TargetRange) (schedulerapp.RunOutbox, error) {
	time.Sleep(f.countTook) // the database's time for the count
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outboxCalls++
	if f.settled {
		return schedulerapp.RunOutbox{Rows: f.eligible, Published: f.eligible}, nil
	}
	return schedulerapp.RunOutbox{Rows: f.eligible / 2}, nil
}

func (f fakeRows) Count(context.Context, domain.TargetRange) (int64, error) {
	time.Sleep(f.countTook)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rowCalls++
	return int64(f.rowCalls), nil
}

func (f fakeLag) Sample(context.Context) (map[string]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.settled {
		return map[string]int64{"d": 0, "s": 0}, nil
	}
	return map[string]int64{"d": 10, "s": 3}, nil
}

func (f *countingFakes) calls() (outbox, rows int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.outboxCalls, f.rowCalls
}

// TestWatcherPacesItsCounts: counts of the run's rows are the watcher's
// costly observation. Sampled every 5 ms for a second with counts taking
// 4 ms each, the watcher counts each kind at most once per 50 counts'
// time (about 5 times, not 200); once the outbox is final and no group
// lags, it counts the persisted rows at every sample.
func TestWatcherPacesItsCounts(t *testing.T) {
	f := &countingFakes{countTook: 4 * time.Millisecond, eligible: 1000}
	s := NewService(Deps{Targets: fakeOutbox{countingFakes: f}, Persisted: fakeRows{countingFakes: f}, Lag: fakeLag{countingFakes: f}}, Options{Sample: 5 * time.Millisecond, Stall: time.Minute},
		slog.New(slog.DiscardHandler))
	rec := domain.Record{Run: domain.Run{ID: "r", DueAt: time.Now(), Params: domain.Params{Channel: domain.ChannelInbox},
		Progress: domain.Progress{TargetsCreated: 1000}}}
	w := newWatcher(s, rec)
	ctx := context.Background()
	samples := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); samples++ {
		w.sample(ctx, s.now())
		time.Sleep(5 * time.Millisecond) // the sampling interval
	}
	outbox, rows := f.calls()
	// At most one count per 50×4 ms = 200 ms of the second, plus the first.
	if outbox < 1 || outbox > 6 || rows < 1 || rows > 6 {
		t.Errorf("%d samples counted the outbox %d times and the persisted rows %d times, want 1 to 6 each", samples, outbox, rows)
	}

	f.mu.Lock()
	f.settled = true
	f.mu.Unlock()
	// One paced outbox count (at most maxCountGap away) sees the outbox
	// final; from then on the pipeline is settled.
	for end := time.Now().Add(3 * maxCountGap); time.Now().Before(end) && !w.outboxFinal; {
		w.sample(ctx, s.now())
		time.Sleep(5 * time.Millisecond)
	}
	if !w.outboxFinal {
		t.Fatalf("the outbox was not counted final within %s", 3*maxCountGap)
	}
	_, before := f.calls()
	for range 20 {
		w.sample(ctx, s.now())
	}
	if _, after := f.calls(); after-before != 20 {
		t.Errorf("settled: 20 samples counted the persisted rows %d times, want 20", after-before)
	}
}

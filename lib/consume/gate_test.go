package consume

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestGateBoundsAndWakes: many takers and givers; the count never passes
// the limit, every taker gets through, and a cancelled taker gets nothing.
func TestGateBoundsAndWakes(t *testing.T) {
	g := newGate(3)
	var inside, peak atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 2000 {
				if !g.take(context.Background()) {
					t.Error("take failed without a cancel")
					return
				}
				n := inside.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				inside.Add(-1)
				g.give()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("takers stuck: a wake-up was lost")
	}
	if p := peak.Load(); p > 3 || p < 1 {
		t.Fatalf("peak in flight %d, limit 3", p)
	}
	if n := g.n.Load(); n != 0 {
		t.Fatalf("count %d after all gave back", n)
	}

	for range 3 {
		g.take(context.Background())
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan bool)
	go func() { got <- g.take(ctx) }()
	cancel()
	if <-got {
		t.Fatal("a full gate let a cancelled taker in")
	}
	if n := g.n.Load(); n != 3 {
		t.Fatalf("count %d, want 3", n)
	}
	woke := make(chan bool)
	go func() { woke <- g.take(context.Background()) }()
	g.give()
	select {
	case ok := <-woke:
		if !ok {
			t.Fatal("take failed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a give did not wake the waiting taker")
	}
}

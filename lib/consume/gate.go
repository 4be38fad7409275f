package consume

import (
	"context"
	"sync"
	"sync/atomic"
)

// gate bounds a count of things in flight. Taking a free place and giving
// one back are single atomic operations; only a taker that finds the gate
// full takes the lock, and only then does a giver need to wake anyone.
// Safe for concurrent use.
type gate struct {
	n     atomic.Int64
	limit int64
	// sleeping is set by a taker before it re-checks the count and waits;
	// a giver that sees it wakes every waiter.
	sleeping atomic.Bool
	mu       sync.Mutex
	wake     chan struct{} // closed to wake the waiters; guarded by mu
}

func newGate(limit int) *gate { return &gate{limit: int64(limit)} }

// take takes a place, waiting while the gate is full; false when ctx ended
// first (nothing taken).
func (g *gate) take(ctx context.Context) bool {
	for {
		n := g.n.Load()
		if n < g.limit {
			if g.n.CompareAndSwap(n, n+1) {
				return true
			}
			continue
		}
		g.mu.Lock()
		g.sleeping.Store(true)
		// Re-check after announcing the wait: either this sees a place
		// given back meanwhile, or the giver sees sleeping and wakes us.
		if g.n.Load() < g.limit {
			g.mu.Unlock()
			continue
		}
		if g.wake == nil {
			g.wake = make(chan struct{})
		}
		ch := g.wake
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// tryTake takes a place when one is free, without waiting.
func (g *gate) tryTake() bool {
	for {
		n := g.n.Load()
		if n >= g.limit {
			return false
		}
		if g.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// give gives a place back.
func (g *gate) give() { g.giveN(1) }

// giveN gives n places back.
func (g *gate) giveN(n int) {
	g.n.Add(-int64(n))
	if g.sleeping.Load() {
		g.mu.Lock()
		g.sleeping.Store(false)
		if g.wake != nil {
			close(g.wake)
			g.wake = nil
		}
		g.mu.Unlock()
	}
}

package consume

import (
	"sort"
	"sync"
)

// tracker follows the offsets of one partition from fetch to completion and
// says which offset may be committed. It is safe for concurrent use.
type tracker struct {
	mu      sync.Mutex
	pending []pendingOffset // in fetch (= offset) order; [head:] is live
	head    int
	// next is the offset after the last one fetched, or the assignment's
	// start offset before anything was fetched (negative when that start
	// is a relative offset such as FirstOffset: nothing to commit yet).
	next int64
}

type pendingOffset struct {
	off  int64
	done bool
}

func newTracker(start int64) *tracker { return &tracker{next: start} }

// add registers a fetched offset; offsets must be added in increasing order.
func (t *tracker) add(off int64) {
	t.mu.Lock()
	t.pending = append(t.pending, pendingOffset{off: off})
	t.next = off + 1
	t.mu.Unlock()
}

// done marks off as finished and returns how many offsets left the window
// (see size): those of the finished prefix, none while a lower offset is
// unfinished. Unknown offsets are ignored.
func (t *tracker) done(off int64) (retired int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	live := t.pending[t.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].off >= off })
	if i == len(live) || live[i].off != off {
		return 0
	}
	live[i].done = true
	head := t.head
	for t.head < len(t.pending) && t.pending[t.head].done {
		t.head++
	}
	retired = t.head - head
	// Compact once the dead prefix dominates, so the slice stays bounded
	// by the window (Config.MaxUncommittedPerPartition).
	if t.head > 1024 && t.head*2 > len(t.pending) {
		n := copy(t.pending, t.pending[t.head:])
		t.pending = t.pending[:n]
		t.head = 0
	}
	return retired
}

// size returns the window: the offsets from the lowest unfinished one to
// the last fetched, finished or not; what a crash would redeliver.
func (t *tracker) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending) - t.head
}

// position returns the offset to commit: the lowest offset not yet done,
// or the offset after the last fetched one. ok is false when nothing has
// been fetched and the start offset is relative.
func (t *tracker) position() (off int64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.head < len(t.pending) {
		return t.pending[t.head].off, true
	}
	return t.next, t.next >= 0
}

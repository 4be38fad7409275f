package consume

import (
	"hash/maphash"
	"sync"
)

// laneStripes is the number of ordering stripes. A record's key is hashed
// to a stripe; records of one stripe run one at a time in submission order,
// so records of one key always do. Two keys sharing a stripe are also
// serialised, which costs little parallelism while the stripes far
// outnumber the workers.
const laneStripes = 8192

// laneLocks guard the stripes, each lock a fixed share of them, so that
// fetchers and workers seldom wait on one another.
const laneLocks = 64

// lanes hands jobs to workers: a job whose stripe is idle becomes ready at
// once; one whose stripe is busy waits in the stripe's queue, and the
// worker that finishes a job of that stripe takes the next one itself.
type lanes[T any] struct {
	ordered bool
	seed    maphash.Seed
	stripes []stripe[T]
	locks   [laneLocks]paddedMutex
	// ready holds jobs whose stripe was idle. Its capacity is the
	// in-flight bound, so a send never blocks.
	ready chan *job[T]
}

type stripe[T any] struct {
	busy    bool
	stopped bool // takes no more jobs (see stop)
	q       []*job[T]
}

type paddedMutex struct {
	sync.Mutex
	_ [56]byte // one lock per cache line
}

func newLanes[T any](o Ordering, maxInFlight int) *lanes[T] {
	l := &lanes[T]{ordered: o != OrderNone, seed: maphash.MakeSeed(), ready: make(chan *job[T], maxInFlight)}
	if l.ordered {
		l.stripes = make([]stripe[T], laneStripes)
	}
	return l
}

// stripeOf returns the stripe of an ordering key.
func (l *lanes[T]) stripeOf(key []byte) int {
	return int(maphash.Bytes(l.seed, key) % laneStripes)
}

// lock locks j's stripe and returns it with its lock, for the caller to
// unlock.
func (l *lanes[T]) lock(j *job[T]) (*stripe[T], *sync.Mutex) {
	mu := &l.locks[j.stripe%laneLocks].Mutex
	mu.Lock()
	return &l.stripes[j.stripe], mu
}

// submit queues j behind the running job of its stripe, or makes it ready.
// It reports false, leaving j to the caller, when j's stripe stopped.
func (l *lanes[T]) submit(j *job[T]) bool {
	if l.ordered {
		s, mu := l.lock(j)
		if s.stopped {
			mu.Unlock()
			return false
		}
		if s.busy {
			s.q = append(s.q, j)
			mu.Unlock()
			return true
		}
		s.busy = true
		mu.Unlock()
	}
	l.ready <- j
	return true
}

// claim marks j's stripe busy for the caller when it is idle and reports
// whether it did; the caller then runs j itself and calls next after.
func (l *lanes[T]) claim(j *job[T]) bool {
	if !l.ordered {
		return true
	}
	s, mu := l.lock(j)
	defer mu.Unlock()
	if s.busy || s.stopped {
		return false
	}
	s.busy = true
	return true
}

// next is called when j finished; it returns the next waiting job of j's
// stripe, or nil after marking the stripe idle.
func (l *lanes[T]) next(j *job[T]) *job[T] {
	if !l.ordered {
		return nil
	}
	s, mu := l.lock(j)
	defer mu.Unlock()
	if len(s.q) == 0 {
		s.busy = false
		s.q = s.q[:0:0] // drop a grown backing array once drained
		return nil
	}
	n := s.q[0]
	s.q[0] = nil
	s.q = s.q[1:]
	return n
}

// stop is called instead of next when j was left unfinished: j's stripe
// takes no more jobs (submit refuses them, claim fails) and stays busy, and
// the jobs waiting in it are returned for the caller to abandon.
func (l *lanes[T]) stop(j *job[T]) []*job[T] {
	if !l.ordered {
		return nil
	}
	s, mu := l.lock(j)
	defer mu.Unlock()
	s.stopped = true
	q := s.q
	s.q = nil
	return q
}

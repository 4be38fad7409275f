package consume

import (
	"hash/maphash"
	"sync"
)

// lanes hands jobs to workers so that jobs with the same key run one at a
// time in submission order while different keys run in parallel. A key with
// a job running has an entry in its shard's queues holding its waiting jobs;
// the worker that finishes a job takes the next one of the same key itself.
// Keys are spread over shards, each with its own lock, so that fetchers and
// workers seldom wait on one another.
type lanes[T any] struct {
	ordered bool
	seed    maphash.Seed
	shards  []laneShard[T]
	// ready holds jobs whose key was idle. Its capacity is the in-flight
	// bound, so a send never blocks.
	ready chan *job[T]
}

type laneShard[T any] struct {
	mu     sync.Mutex
	queues map[string][]*job[T]
	_      [40]byte // keep shards on separate cache lines
}

const laneShards = 32

func newLanes[T any](o Ordering, maxInFlight int) *lanes[T] {
	l := &lanes[T]{ordered: o != OrderNone, seed: maphash.MakeSeed(), ready: make(chan *job[T], maxInFlight)}
	if l.ordered {
		l.shards = make([]laneShard[T], laneShards)
		for i := range l.shards {
			l.shards[i].queues = map[string][]*job[T]{}
		}
	}
	return l
}

func (l *lanes[T]) shard(key string) *laneShard[T] {
	return &l.shards[maphash.String(l.seed, key)%laneShards]
}

// submit queues j behind running jobs of its key, or makes it ready.
func (l *lanes[T]) submit(j *job[T]) {
	if l.ordered {
		s := l.shard(j.key)
		s.mu.Lock()
		if q, busy := s.queues[j.key]; busy {
			s.queues[j.key] = append(q, j)
			s.mu.Unlock()
			return
		}
		s.queues[j.key] = nil
		s.mu.Unlock()
	}
	l.ready <- j
}

// next is called when a job of key finished; it returns the key's next
// waiting job, or nil after marking the key idle.
func (l *lanes[T]) next(key string) *job[T] {
	if !l.ordered {
		return nil
	}
	s := l.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[key]
	if len(q) == 0 {
		delete(s.queues, key)
		return nil
	}
	j := q[0]
	q[0] = nil
	s.queues[key] = q[1:]
	return j
}

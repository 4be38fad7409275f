package consume

import "sync"

// lanes hands jobs to workers so that jobs with the same key run one at a
// time in submission order while different keys run in parallel. A key with
// a job running has an entry in queues holding its waiting jobs; the worker
// that finishes a job takes the next one of the same key itself.
type lanes[T any] struct {
	ordered bool
	mu      sync.Mutex
	queues  map[string][]*job[T]
	// ready holds jobs whose key was idle. Its capacity is the in-flight
	// bound, so a send never blocks.
	ready chan *job[T]
}

func newLanes[T any](o Ordering, maxInFlight int) *lanes[T] {
	return &lanes[T]{ordered: o != OrderNone, queues: map[string][]*job[T]{}, ready: make(chan *job[T], maxInFlight)}
}

// submit queues j behind running jobs of its key, or makes it ready.
func (l *lanes[T]) submit(j *job[T]) {
	if l.ordered {
		l.mu.Lock()
		if q, busy := l.queues[j.key]; busy {
			l.queues[j.key] = append(q, j)
			l.mu.Unlock()
			return
		}
		l.queues[j.key] = nil
		l.mu.Unlock()
	}
	l.ready <- j
}

// next is called when a job of key finished; it returns the key's next
// waiting job, or nil after marking the key idle.
func (l *lanes[T]) next(key string) *job[T] {
	if !l.ordered {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queues[key]
	if len(q) == 0 {
		delete(l.queues, key)
		return nil
	}
	j := q[0]
	q[0] = nil
	l.queues[key] = q[1:]
	return j
}

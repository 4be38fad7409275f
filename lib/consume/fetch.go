package consume

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
)

// takeOverAfter bounds how long a record a fetcher runs itself (see
// Config.InlineBelow) may hold up its partition's fetching: past it,
// another goroutine takes over the fetching and the one running the
// handler finishes it and ends.
const takeOverAfter = 5 * time.Millisecond

// openReader creates p's reader positioned at start; false (logged) when
// the position cannot be set.
func (g *generation[T]) openReader(p *partition, start int64) bool {
	c := g.c
	p.reader = kafka.NewReader(kafka.ReaderConfig{
		Brokers:        c.cfg.Brokers,
		Topic:          p.topic,
		Partition:      p.id,
		MinBytes:       c.cfg.FetchMinBytes,
		MaxBytes:       c.cfg.FetchMaxBytes,
		MaxWait:        c.cfg.FetchMaxWait,
		QueueCapacity:  256,
		ReadBackoffMin: 100 * time.Millisecond,
		ReadBackoffMax: time.Second,
		MaxAttempts:    5,
	})
	if err := p.reader.SetOffset(start); err != nil {
		c.cfg.Logger.Error("set fetch offset", "partition", p.name, "offset", start, "err", err)
		return false
	}
	return true
}

// takeOver is the fetchers' watchdog: every takeOverAfter it looks for a
// fetcher that has been running a handler itself for longer than that,
// takes the fetching from it and starts a new fetcher, so that one slow
// record never holds up the rest of its partition. It returns when ctx
// (the fetching context) ends.
func (g *generation[T]) takeOver(ctx context.Context, fetchers *fetcherSet) {
	t := time.NewTicker(takeOverAfter)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := g.mono()
		for _, p := range g.parts {
			since := p.inlineSince.Load()
			if since != 0 && now-since >= int64(takeOverAfter) && fetchers.takeOver(p, since, func() { g.fetch(ctx, p) }) {
				g.c.m.takeovers.WithLabelValues(g.c.cfg.GroupID).Inc()
			}
		}
	}
}

// fetch reads p with p's reader until ctx ends or, after running a record
// itself, it finds its fetching taken over.
func (g *generation[T]) fetch(ctx context.Context, p *partition) {
	c, r := g.c, p.reader
	// Records ordered by partition use the partition's position as their
	// stripe, so that no two partitions of a generation share one.
	pstripe := p.index % laneStripes
	for attempt := 1; ; {
		msg, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.cfg.Logger.Warn("fetch", "group", c.cfg.GroupID, "partition", p.name, "err", err)
			if !sleep(ctx, Backoff(attempt, c.cfg.BackoffMin, c.cfg.BackoffMax)) {
				return
			}
			attempt++
			continue
		}
		attempt = 1
		// The window first: a partition paused behind an unfinished
		// record holds no in-flight place meanwhile.
		if !p.window.take(ctx) {
			return
		}
		if !p.inFlight.take(ctx) {
			p.window.give()
			return
		}
		if !c.inFlight.take(ctx) {
			p.inFlight.give()
			p.window.give()
			return
		}
		p.tr.add(msg.Offset)
		p.hwm.Store(msg.HighWaterMark)
		p.nConsumed.Add(1)
		j := g.newJob()
		j.rec.Msg, j.part = msg, p
		if msg.Value == nil {
			p.skipped.Inc()
			g.complete(j)
			g.recycle(j)
			continue
		}
		if len(msg.Value) > c.cfg.MaxValueBytes {
			j.err = fmt.Errorf("%w: %d bytes, limit %d", ErrOversized, len(msg.Value), c.cfg.MaxValueBytes)
		} else if err := kafkax.CheckSchema(msg.Headers); err != nil {
			j.err = err
		} else if j.rec.Value, err = c.decode(&j.rec.Msg); err != nil {
			j.err = fmt.Errorf("decode value: %w", err)
		}
		if g.batchIn != nil {
			select {
			case g.batchIn <- j:
			case <-ctx.Done():
				g.abandon(j)
				return
			}
			continue
		}
		switch {
		case c.cfg.Ordering == OrderPartition || (c.cfg.Ordering == OrderKey && len(msg.Key) == 0):
			j.stripe = pstripe
		case c.cfg.Ordering == OrderKey:
			j.stripe = g.lanes.stripeOf(msg.Key)
		}
		if j.err != nil || c.handlerNanos.Load() >= int64(c.cfg.InlineBelow) || !g.running.tryTake() {
			g.submit(j)
			continue
		}
		if !g.lanes.claim(j) {
			g.running.give()
			g.submit(j)
			continue
		}
		kept := g.runInline(p, j)
		g.running.give()
		if !kept {
			return // taken over
		}
	}
}

// submit hands j to the lanes, or abandons it when its stripe stopped
// (see settle).
func (g *generation[T]) submit(j *job[T]) {
	if !g.lanes.submit(j) {
		g.abandon(j)
		g.recycle(j)
	}
}

// runInline runs j, whose stripe the caller claimed, on the fetching
// goroutine: one attempt only. A failed attempt, and the next waiting
// record of the stripe, go to a worker with the stripe still claimed, so
// the fetcher never waits out a backoff, a dead-letter write or a queue.
// (The ready channel holds as many jobs as may be in flight: never full.)
// It returns false when the watchdog took the fetching over meanwhile.
func (g *generation[T]) runInline(p *partition, j *job[T]) bool {
	since := g.mono()
	p.inlineSince.Store(since)
	done := false
	if g.hctx.Err() != nil {
		g.abandon(j)
	} else if err := g.runOnce(j); err != nil {
		j.failed = err
		g.lanes.ready <- j
		return p.inlineSince.CompareAndSwap(since, 0)
	} else {
		done = true
	}
	next := g.settle(j, done)
	g.recycle(j)
	if next != nil {
		g.lanes.ready <- next
	}
	return p.inlineSince.CompareAndSwap(since, 0)
}

// fetcherSet counts a generation's running fetchers. A fetcher whose
// fetching the watchdog takes over returns once its handler does; its
// successor is counted before that, so the count reaches zero only when
// every partition's fetching has ended, never in the middle of a takeover
// (which would end the generation's fetching early).
type fetcherSet struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0
}

// goFetch runs fn as a counted fetcher.
func (f *fetcherSet) goFetch(fn func()) {
	f.mu.Lock()
	f.add()
	f.mu.Unlock()
	go f.run(fn)
}

// takeOver swaps p's inline start since for 0, taking p's fetching from
// the fetcher running a record itself, and runs fn as that fetcher's
// successor. The swap and the count happen under the lock, before the
// old fetcher (whose own swap then fails) can leave. It reports whether
// the swap succeeded.
func (f *fetcherSet) takeOver(p *partition, since int64, fn func()) bool {
	f.mu.Lock()
	if !p.inlineSince.CompareAndSwap(since, 0) {
		f.mu.Unlock()
		return false
	}
	f.add()
	f.mu.Unlock()
	go f.run(fn)
	return true
}

func (f *fetcherSet) add() {
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
}

func (f *fetcherSet) run(fn func()) {
	defer func() {
		f.mu.Lock()
		f.n--
		if f.n == 0 {
			close(f.idle)
		}
		f.mu.Unlock()
	}()
	fn()
}

// wait returns once no fetcher runs.
func (f *fetcherSet) wait() {
	for {
		f.mu.Lock()
		if f.n == 0 {
			f.mu.Unlock()
			return
		}
		idle := f.idle
		f.mu.Unlock()
		<-idle
	}
}

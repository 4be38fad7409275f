package consume

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

// job is one record on its way from fetch to completion.
type job[T any] struct {
	rec     Record[T]
	err     error // decode failure: dead letter it
	part    *partition
	stripe  int   // ordering stripe (see lanes)
	attempt int   // handler attempts made so far
	failed  error // the error of an attempt made inline, for the worker
}

// partition is the per-generation state of one assigned partition.
type partition struct {
	index     int // position among the generation's partitions
	topic     string
	id        int
	name      string
	tr        *tracker
	inFlight  *gate
	committed int64 // touched only by the commit path
	hwm       atomic.Int64
	// window bounds tr's window (Config.MaxUncommittedPerPartition): a
	// place per fetched record, given back as records leave the window
	// (complete).
	window *gate
	// nConsumed and nProcessed count records cheaply on the hot path;
	// the committer moves them into the Prometheus counters (flushCounts).
	nConsumed, nProcessed atomic.Int64
	// reader fetches the partition; one goroutine at a time uses it (the
	// fetcher, see fetch).
	reader *kafka.Reader
	// inlineSince is when (g.mono) the handler the fetcher runs itself
	// started, 0 while it runs none. Whoever swaps it to 0 first owns the
	// fetching: the fetcher when the handler returns, or the watchdog,
	// which then starts another fetcher (see takeOver).
	inlineSince       atomic.Int64
	reportedConsumed  int64 // touched only by flushCounts
	reportedProcessed int64

	consumed, processed, retried, deadLettered, skipped prometheus.Counter
}

// generation is the state of one generation's run.
type generation[T any] struct {
	c        *Consumer[T]
	gen      *kafka.Generation
	parts    []*partition
	hctx     context.Context // handler context: ends at the drain deadline
	draining <-chan struct{} // closed when the drain begins (see Draining)
	// batchStopped is set once a batch was abandoned: the later batches of
	// the generation are abandoned too (they may hold later records of its
	// keys).
	batchStopped     atomic.Bool
	lanes            *lanes[T]
	batchIn          chan *job[T]
	flushCh          chan []*job[T]
	inFlight         prometheus.Gauge // set from the gates by flushCounts
	reportedInFlight int64            // touched only by flushCounts
	latency          prometheus.Observer
	jobs             sync.Pool // recycled *job[T]

	base time.Time // origin of mono
	// running bounds the handlers running at once, on workers and
	// fetchers together, to Workers.
	running *gate
}

// mono returns a monotonic clock reading in nanoseconds, never 0; cheaper
// than time.Now, which also reads the wall clock.
func (g *generation[T]) mono() int64 { return int64(time.Since(g.base)) + 1 }

// newJob returns a cleared job, recycled when one is free.
func (g *generation[T]) newJob() *job[T] {
	if j, ok := g.jobs.Get().(*job[T]); ok {
		return j
	}
	return new(job[T])
}

// recycle clears j and keeps it for reuse. Only for a job that is finished
// (completed or abandoned) and that nothing refers to any more.
func (g *generation[T]) recycle(j *job[T]) {
	*j = job[T]{}
	g.jobs.Put(j)
}

func (c *Consumer[T]) runGeneration(ctx, gctx context.Context, gen *kafka.Generation) {
	// fetchCtx ends when the generation ends or the consumer stops: the
	// drain begins then, and handlers see it through Draining.
	fetchCtx, stopFetch := context.WithCancel(context.Background())
	defer stopFetch()
	hctx, hcancel := context.WithCancel(context.WithValue(context.WithoutCancel(ctx), drainingKey{}, fetchCtx.Done()))
	defer hcancel()
	g := &generation[T]{c: c, gen: gen, hctx: hctx, draining: fetchCtx.Done(), base: time.Now(), inFlight: c.m.inFlight.WithLabelValues(c.cfg.GroupID),
		latency: c.m.handlerSeconds.WithLabelValues(c.cfg.GroupID)}
	for topic, as := range gen.Assignments {
		for _, a := range as {
			p := c.newPartition(topic, a)
			p.index = len(g.parts)
			g.parts = append(g.parts, p)
		}
	}
	log := c.cfg.Logger.With("group", c.cfg.GroupID, "generation", gen.ID)

	// kafka-go stops heartbeating when gctx ends, as the drain begins; the
	// membership is held from then until this function returns, so that
	// the partitions stay this generation's and its final commit counts.
	held := make(chan struct{})
	var session sync.WaitGroup
	session.Go(func() { c.holdSession(gctx, held, gen, hcancel, log) })
	defer func() {
		close(held)
		session.Wait()
	}()

	go func() {
		select {
		case <-ctx.Done():
		case <-gctx.Done():
		case <-fetchCtx.Done():
		}
		stopFetch()
	}()

	var workers sync.WaitGroup
	if c.batch != nil {
		g.batchIn = make(chan *job[T], c.cfg.BatchSize)
		g.flushCh = make(chan []*job[T])
		workers.Go(g.accumulate)
		for range c.cfg.BatchConcurrency {
			workers.Go(g.flushLoop)
		}
	} else {
		g.lanes = newLanes[T](c.cfg.Ordering, c.cfg.MaxInFlight)
		g.running = newGate(c.cfg.Workers)
		for range c.cfg.Workers {
			workers.Go(g.workLoop)
		}
	}

	commitDone := make(chan struct{})
	var committer sync.WaitGroup
	committer.Go(func() {
		t := time.NewTicker(c.cfg.CommitInterval)
		defer t.Stop()
		for {
			select {
			case <-commitDone:
				return
			case <-t.C:
				g.flushCounts()
				if err := g.commit(); err != nil {
					log.Warn("commit offsets", "err", err)
				}
			}
		}
	})

	var fetchers fetcherSet
	for _, p := range g.parts {
		start := p.committed
		if start < 0 {
			start = c.cfg.StartOffset
		}
		fetchers.goFetch(func() {
			if g.openReader(p, start) {
				g.fetch(fetchCtx, p)
			}
		})
	}
	var watchdog sync.WaitGroup
	if g.lanes != nil {
		watchdog.Go(func() { g.takeOver(fetchCtx, &fetchers) })
	}
	// The drain deadline runs from the moment fetching stops (a fetcher
	// may be finishing a record it runs itself).
	drainTimer := make(chan *time.Timer, 1)
	context.AfterFunc(fetchCtx, func() {
		drainTimer <- time.AfterFunc(c.cfg.DrainTimeout, func() {
			log.Warn("drain deadline passed; cancelling running handlers", "timeout", c.cfg.DrainTimeout)
			hcancel()
		})
	})
	fetchers.wait()
	stopFetch() // fetchers that failed to start return before the generation ends
	// The watchdog ends with fetchCtx; a fetcher it started as the others
	// returned sees fetchCtx ended and returns at once.
	watchdog.Wait()
	fetchers.wait()
	// A reader's Close waits for its fetch in progress, which the broker
	// may hold for up to FetchMaxWait: the readers close at once, so
	// that the drain waits for one such fetch, not one per partition.
	var closing sync.WaitGroup
	for _, p := range g.parts {
		if p.reader != nil {
			closing.Go(func() { _ = p.reader.Close() })
		}
	}
	closing.Wait()

	// Drain: nothing new is submitted from here on.
	if g.batchIn != nil {
		close(g.batchIn)
	} else {
		close(g.lanes.ready)
	}
	workers.Wait()
	(<-drainTimer).Stop()
	close(commitDone)
	committer.Wait()
	g.flushCounts()
	if err := g.commit(); err != nil {
		log.Warn("final commit", "err", err)
	}
	for _, p := range g.parts {
		c.m.lag.DeleteLabelValues(c.cfg.GroupID, p.topic, strconv.Itoa(p.id))
		c.m.committedOffset.DeleteLabelValues(c.cfg.GroupID, p.topic, strconv.Itoa(p.id))
		c.m.uncommitted.DeleteLabelValues(c.cfg.GroupID, p.topic, strconv.Itoa(p.id))
	}
	log.Info("generation ended")
}

func (c *Consumer[T]) newPartition(topic string, a kafka.PartitionAssignment) *partition {
	group := c.cfg.GroupID
	p := &partition{
		topic: topic, id: a.ID, name: topic + "/" + strconv.Itoa(a.ID),
		tr:           newTracker(a.Offset),
		inFlight:     newGate(c.cfg.MaxInFlightPerPartition),
		window:       newGate(c.cfg.MaxUncommittedPerPartition),
		committed:    a.Offset,
		consumed:     c.m.consumed.WithLabelValues(group, topic),
		processed:    c.m.processed.WithLabelValues(group, topic),
		retried:      c.m.retried.WithLabelValues(group, topic),
		deadLettered: c.m.deadLettered.WithLabelValues(group, topic),
		skipped:      c.m.skipped.WithLabelValues(group, topic),
	}
	if a.Offset < 0 {
		p.committed = -1
	}
	return p
}

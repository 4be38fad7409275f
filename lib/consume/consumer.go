package consume

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
)

// ErrOversized is the dead-letter reason of a value over MaxValueBytes.
var ErrOversized = errors.New("value over the size limit")

// ErrPanic is the dead-letter reason of records whose handler panicked,
// followed by the panic's value (the stack goes to the log). A panic is a
// bug, not a passing failure: the records are dead lettered at once, never
// retried, and the panic is counted (handler_panics_total).
var ErrPanic = errors.New("handler panicked")

// Record is one consumed record and its decoded value.
type Record[T any] struct {
	Msg   kafka.Message
	Value T
}

// Decoder turns a record's value into T. An error means the record is
// undecodable: it goes to the dead-letter topic and never reaches a handler.
type Decoder[T any] func(msg *kafka.Message) (T, error)

// Handler handles one record. It must return promptly once ctx ends (ctx
// ends when the drain deadline passes, not when the generation ends; the
// drain's beginning is Draining(ctx)). Returning nil marks the record done;
// an error is retried (see Permanent), except ErrDraining during a drain,
// which abandons the record; a panic is recovered and dead letters the
// record at once (see ErrPanic).
// rec belongs to the runtime again once Handle returns: keep a copy of
// what is needed later, never the pointer.
type Handler[T any] interface {
	Handle(ctx context.Context, rec *Record[T]) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc[T any] func(ctx context.Context, rec *Record[T]) error

// Handle calls f.
func (f HandlerFunc[T]) Handle(ctx context.Context, rec *Record[T]) error { return f(ctx, rec) }

// BatchHandler handles a batch of records, possibly from several partitions.
// Returning nil marks every record of the batch done; an error retries the
// whole batch, except ErrDraining during a drain, which abandons it and the
// generation's later batches (see Draining); a panic is recovered and dead
// letters the whole batch at once (see ErrPanic). It must return promptly
// once ctx ends. The records
// belong to the runtime again once HandleBatch returns: never keep the
// pointers.
type BatchHandler[T any] interface {
	HandleBatch(ctx context.Context, recs []*Record[T]) error
}

// BatchHandlerFunc adapts a function to BatchHandler.
type BatchHandlerFunc[T any] func(ctx context.Context, recs []*Record[T]) error

// HandleBatch calls f.
func (f BatchHandlerFunc[T]) HandleBatch(ctx context.Context, recs []*Record[T]) error {
	return f(ctx, recs)
}

// Consumer consumes a group's topics with a per-record or a batch handler.
// Run it once.
type Consumer[T any] struct {
	cfg     Config
	decode  Decoder[T]
	handler Handler[T]
	batch   BatchHandler[T]

	inFlight *gate // process-wide in-flight bound
	m        *metrics

	failing atomic.Pointer[error] // last batch failure, nil after a success

	// handlerNanos is a moving average of the per-record handler's
	// duration, kept across generations; it starts at a pessimistic 1 ms,
	// so that records run on a fetcher only once handlers proved short.
	handlerNanos atomic.Int64
}

// New returns a Consumer that hands records one at a time to h.
func New[T any](cfg Config, decode Decoder[T], h Handler[T]) (*Consumer[T], error) {
	return newConsumer(cfg, decode, h, nil)
}

// NewBatch returns a Consumer that hands batches to h.
func NewBatch[T any](cfg Config, decode Decoder[T], h BatchHandler[T]) (*Consumer[T], error) {
	return newConsumer[T](cfg, decode, nil, h)
}

func newConsumer[T any](cfg Config, decode Decoder[T], h Handler[T], bh BatchHandler[T]) (*Consumer[T], error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if decode == nil {
		return nil, errors.New("consume: no decoder")
	}
	c := &Consumer[T]{
		cfg: cfg, decode: decode, handler: h, batch: bh,
		inFlight: newGate(cfg.MaxInFlight),
		m:        newMetrics(cfg.Registerer),
	}
	c.handlerNanos.Store(int64(time.Millisecond))
	return c, nil
}

// Check reports an error while the batch handler keeps failing (for
// example the database is down and the batch is being retried); it is nil
// again after the next success. Safe for concurrent use.
func (c *Consumer[T]) Check(context.Context) error {
	if p := c.failing.Load(); p != nil {
		return fmt.Errorf("handler failing, retrying: %w", *p)
	}
	return nil
}

// Run joins the group and consumes until ctx ends, then drains (see the
// package documentation), commits, leaves the group and returns nil. It
// returns an error only when the group cannot be created.
func (c *Consumer[T]) Run(ctx context.Context) error {
	group, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                     c.cfg.GroupID,
		Brokers:                c.cfg.Brokers,
		Topics:                 c.cfg.Topics,
		HeartbeatInterval:      c.cfg.HeartbeatInterval,
		SessionTimeout:         c.cfg.SessionTimeout,
		RebalanceTimeout:       c.cfg.RebalanceTimeout,
		JoinGroupBackoff:       time.Second,
		StartOffset:            c.cfg.StartOffset,
		WatchPartitionChanges:  true,
		PartitionWatchInterval: 5 * time.Second,
		Timeout:                10 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("create consumer group %s: %w", c.cfg.GroupID, err)
	}
	// Closing the group waits for the running generation function, which
	// drains and commits, and then leaves the group.
	closed := make(chan struct{})
	go func() {
		<-ctx.Done()
		_ = group.Close()
		close(closed)
	}()
	log := c.cfg.Logger.With("group", c.cfg.GroupID)
	for {
		gen, err := group.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				break
			}
			log.Warn("consumer group: waiting for a generation", "err", err)
			continue
		}
		c.m.rebalances.WithLabelValues(c.cfg.GroupID).Inc()
		n := 0
		for _, as := range gen.Assignments {
			n += len(as)
		}
		log.Info("joined generation", "generation", gen.ID, "member", gen.MemberID, "partitions", n)
		gen.Start(func(gctx context.Context) { c.runGeneration(ctx, gctx, gen) })
	}
	<-closed
	log.Info("left consumer group")
	return nil
}

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

// takeOverAfter bounds how long a record a fetcher runs itself (see
// Config.InlineBelow) may hold up its partition's fetching: past it,
// another goroutine takes over the fetching and the one running the
// handler finishes it and ends.
const takeOverAfter = 5 * time.Millisecond

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

	var fetchers sync.WaitGroup
	for _, p := range g.parts {
		start := p.committed
		if start < 0 {
			start = c.cfg.StartOffset
		}
		fetchers.Go(func() {
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
	fetchers.Wait()
	stopFetch() // fetchers that failed to start return before the generation ends
	// The watchdog ends with fetchCtx; a fetcher it started after the
	// others returned sees fetchCtx ended and returns at once.
	watchdog.Wait()
	fetchers.Wait()
	for _, p := range g.parts {
		if p.reader != nil {
			_ = p.reader.Close()
		}
	}

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

// openReader creates p's reader positioned at start; false (logged) when
// the position cannot be set.
func (g *generation[T]) openReader(p *partition, start int64) bool {
	c := g.c
	p.reader = kafka.NewReader(kafka.ReaderConfig{
		Brokers:        c.cfg.Brokers,
		Topic:          p.topic,
		Partition:      p.id,
		MinBytes:       1,
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
func (g *generation[T]) takeOver(ctx context.Context, fetchers *sync.WaitGroup) {
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
			if since != 0 && now-since >= int64(takeOverAfter) && p.inlineSince.CompareAndSwap(since, 0) {
				g.c.m.takeovers.WithLabelValues(g.c.cfg.GroupID).Inc()
				fetchers.Go(func() { g.fetch(ctx, p) })
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

// release gives back the in-flight places of j.
func (g *generation[T]) release(j *job[T]) {
	j.part.inFlight.give()
	g.c.inFlight.give()
}

// complete marks j done so its offset may be committed.
func (g *generation[T]) complete(j *job[T]) {
	if n := j.part.tr.done(j.rec.Msg.Offset); n > 0 {
		j.part.window.giveN(n)
	}
	g.release(j)
}

// abandon gives up on j without marking it done: its offset is not
// committed and whoever owns the partition next fetches it again.
func (g *generation[T]) abandon(j *job[T]) { g.release(j) }

// workLoop runs per-record jobs until the lanes are closed and empty.
func (g *generation[T]) workLoop() {
	for j := range g.lanes.ready {
		for j != nil {
			done := false
			if g.hctx.Err() != nil || !g.running.take(g.hctx) {
				g.abandon(j)
			} else {
				done = g.handle(j)
				g.running.give()
			}
			next := g.settle(j, done)
			g.recycle(j)
			j = next
		}
	}
}

// settle is called when j left its worker, done (completed or dead
// lettered) or not (abandoned), and returns the next job of j's stripe to
// run, if any. After an abandoned job the stripe's waiting jobs are
// abandoned too and the stripe takes no more jobs in this generation, so
// that a key's later records never run before an earlier one that is to
// run again.
func (g *generation[T]) settle(j *job[T], done bool) *job[T] {
	if done {
		return g.lanes.next(j)
	}
	for _, w := range g.lanes.stop(j) {
		g.abandon(w)
		g.recycle(w)
	}
	return nil
}

// handle runs the handler on j until it is done: retried with backoff,
// dead lettered when it keeps failing, abandoned when the handler context
// ends or the handler gave way to the drain (ErrDraining). A job that
// failed inline comes with its first attempt made. It reports whether j is
// done (false: abandoned).
func (g *generation[T]) handle(j *job[T]) bool {
	c, p := g.c, j.part
	if j.err != nil {
		return g.deadLetter([]*job[T]{j}, j.err, 0)
	}
	err := j.failed // an attempt made inline (runInline)
	if j.attempt == 0 {
		err = g.runOnce(j)
	}
	for err != nil {
		if g.hctx.Err() != nil || g.gaveWay(err) {
			g.abandon(j)
			return false
		}
		if errors.Is(err, ErrPermanent) || j.attempt >= c.cfg.MaxAttempts {
			return g.deadLetter([]*job[T]{j}, err, j.attempt)
		}
		p.retried.Inc()
		if !sleep(g.hctx, Backoff(j.attempt, c.cfg.BackoffMin, c.cfg.BackoffMax)) {
			g.abandon(j)
			return false
		}
		err = g.runOnce(j)
	}
	return true
}

// runOnce calls the handler once on j and completes j when it succeeded.
func (g *generation[T]) runOnce(j *job[T]) error {
	j.attempt++
	start := g.mono()
	err := g.callHandler(j)
	took := g.mono() - start
	g.latency.Observe(float64(took) / 1e9)
	// A moving average with weight 1/8; concurrent updates may lose one,
	// which only delays it.
	avg := g.c.handlerNanos.Load()
	g.c.handlerNanos.Store(avg + (took-avg)/8)
	if err == nil {
		j.part.nProcessed.Add(1)
		g.complete(j)
	}
	return err
}

// callHandler calls the handler on j once; a panic in it comes back as a
// permanent error wrapping ErrPanic.
func (g *generation[T]) callHandler(j *job[T]) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = g.c.recovered(v, "partition", j.part.name, "offset", j.rec.Msg.Offset)
		}
	}()
	return g.c.handler.Handle(g.hctx, &j.rec)
}

// recovered turns v, recovered from a handler's panic, into a permanent
// error wrapping ErrPanic, counts it and logs it with the stack (call it in
// the deferred function that recovered, so the stack is the panic's);
// attrs say which records the handler had.
func (c *Consumer[T]) recovered(v any, attrs ...any) error {
	c.m.panics.WithLabelValues(c.cfg.GroupID).Inc()
	attrs = append(attrs, "group", c.cfg.GroupID, "panic", v, "stack", string(debug.Stack()))
	c.cfg.Logger.Error("handler panicked; dead-lettering without retry", attrs...)
	return Permanent(fmt.Errorf("%w: %v", ErrPanic, v))
}

// deadLetter sends jobs to the DLQ with reason (each job's own decode error
// wins over reason) and completes them once Kafka acknowledged. It keeps
// trying until the handler context ends; then the jobs are abandoned. It
// reports whether the jobs were dead lettered (false: abandoned).
func (g *generation[T]) deadLetter(jobs []*job[T], reason error, attempts int) bool {
	c := g.c
	recs := make([]kafkax.DeadRecord, len(jobs))
	for i, j := range jobs {
		r := reason
		if j.err != nil {
			r = j.err
		}
		recs[i] = kafkax.DeadRecord{Msg: j.rec.Msg, Reason: r, Attempts: attempts}
	}
	for try := 1; ; try++ {
		err := c.cfg.DLQ.SendMany(g.hctx, recs)
		if err == nil {
			break
		}
		c.cfg.Logger.Error("send to dead-letter topic", "group", c.cfg.GroupID, "records", len(recs), "err", err)
		if !sleep(g.hctx, Backoff(try, c.cfg.BackoffMin, c.cfg.BackoffMax)) {
			for _, j := range jobs {
				g.abandon(j)
			}
			return false
		}
	}
	for _, j := range jobs {
		j.part.deadLettered.Inc()
		g.complete(j)
	}
	return true
}

// flushCounts moves the hot-path counts into the Prometheus metrics: the
// consumed and processed counters and this generation's share of the
// in-flight gauge (records it fetched and has not finished). Called by the
// committer only, every commit interval and at generation end, so the
// metrics lag by at most one interval.
func (g *generation[T]) flushCounts() {
	var inFlight int64
	for _, p := range g.parts {
		c, d := p.nConsumed.Load(), p.nProcessed.Load()
		p.consumed.Add(float64(c - p.reportedConsumed))
		p.processed.Add(float64(d - p.reportedProcessed))
		p.reportedConsumed, p.reportedProcessed = c, d
		inFlight += p.inFlight.n.Load()
	}
	g.inFlight.Add(float64(inFlight - g.reportedInFlight))
	g.reportedInFlight = inFlight
}

// commit commits, within this generation, the position of every partition
// that moved since the last commit.
func (g *generation[T]) commit() error {
	group := g.c.cfg.GroupID
	offsets := map[string]map[int]int64{}
	var moved []*partition
	for _, p := range g.parts {
		off, ok := p.tr.position()
		if hwm := p.hwm.Load(); hwm > 0 && ok {
			g.c.m.lag.WithLabelValues(group, p.topic, strconv.Itoa(p.id)).Set(float64(max(hwm-off, 0)))
		}
		g.c.m.uncommitted.WithLabelValues(group, p.topic, strconv.Itoa(p.id)).Set(float64(p.tr.size()))
		if !ok || off <= p.committed {
			continue
		}
		if offsets[p.topic] == nil {
			offsets[p.topic] = map[int]int64{}
		}
		offsets[p.topic][p.id] = off
		moved = append(moved, p)
	}
	if len(moved) == 0 {
		return nil
	}
	if err := g.gen.CommitOffsets(offsets); err != nil {
		return fmt.Errorf("commit %d partition(s) in generation %d: %w", len(moved), g.gen.ID, err)
	}
	for _, p := range moved {
		p.committed = offsets[p.topic][p.id]
		g.c.m.committedOffset.WithLabelValues(group, p.topic, strconv.Itoa(p.id)).Set(float64(p.committed))
	}
	return nil
}

package adapters

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// ErrBatcherClosed is returned by Batcher.Do once the batcher has stopped.
var ErrBatcherClosed = errors.New("redis batcher stopped")

// Batcher sends the Redis commands of many concurrent callers in shared
// pipelines: each flusher goroutine takes the first waiting call, then
// everything else queued at that moment (up to maxCmds commands), sends it
// all in one round trip and answers each caller. Under load a pipeline
// carries the calls that arrived while the previous one was in flight, so
// the number of round trips stays near (throughput x round-trip time) /
// batch size instead of one per command.
//
// Requests of one kind can also be merged (DoMerged): the flusher turns
// the merged requests it gathered into one command per mergeMax of them
// (one script call that claims many notifications), which saves Redis the
// work of a command per request, plus any commands some of them need
// beside it.
//
// Do and DoMerged are safe for concurrent use. Run the batcher with Run;
// both fail with ErrBatcherClosed after Run returned.
type Batcher struct {
	rdb       redis.UniversalClient
	in        chan *call
	stopped   chan struct{}
	maxCmds   int
	pipelines int
	timeout   time.Duration
	size      prometheus.Observer
	pool      sync.Pool
}

type call struct {
	cmds   []redis.Cmder
	merger Merger // with part: a request merged with others of merger
	part   any
	done   chan struct{} // buffered 1: the flusher never blocks on an abandoned call
}

// A Merger sends requests of one kind as one command: the flusher hands it
// the parts (requests) of a pipeline, at most mergeMax at a time, and
// sends the commands Merge builds, in their order; once their replies are
// in (or they failed) it calls Answer with the same parts, which gives
// each part its outcome. Mergers are compared with ==: use one pointer
// per kind and configuration. Merge and Answer run on the flusher
// goroutines (at once on several when the batcher has several pipelines)
// and hold up every caller of their pipeline: they must not block.
type Merger interface {
	// Merge returns the commands that carry parts (at least one part): the
	// merged command first, then any that some of the parts need beside
	// it.
	Merge(ctx context.Context, parts []any) []redis.Cmder
	// Answer gives each of parts its outcome from cmds, the commands Merge
	// returned for them.
	Answer(cmds []redis.Cmder, parts []any)
}

// mergeMax bounds the parts of one merged command, so that one command
// (a script, which Redis runs alone) stays short for Redis's other clients.
const mergeMax = 64

// merged is a pipeline's parts of one Merger.
type merged struct {
	m     Merger
	parts []any
}

// NewBatcher returns a batcher over rdb gathering at most maxCmds commands
// and merged parts (each counting once, whatever commands Merge adds for
// it beside the merged one) per pipeline with up to pipelines pipelines in flight,
// each bounded by timeout. size observes the commands each pipeline sends,
// a merged command counting as one, and the commands beside it each as one
// (nil: not observed).
func NewBatcher(rdb redis.UniversalClient, maxCmds, pipelines int, timeout time.Duration, size prometheus.Observer) *Batcher {
	b := &Batcher{
		rdb: rdb, in: make(chan *call, maxCmds*pipelines), stopped: make(chan struct{}),
		maxCmds: maxCmds, pipelines: pipelines, timeout: timeout, size: size,
	}
	b.pool.New = func() any { return &call{done: make(chan struct{}, 1)} }
	return b
}

// Run sends pipelines until ctx ends. Stop it only after every caller of Do
// is finished (the callers that are still waiting then get
// ErrBatcherClosed). It returns nil.
func (b *Batcher) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range b.pipelines {
		wg.Go(func() { b.flushLoop(ctx) })
	}
	wg.Wait()
	close(b.stopped)
	return nil
}

// Do sends cmds in one of the next pipelines and returns when their replies
// are in (each command's own Err tells its outcome), when ctx ends (the
// commands may still be sent) or when the batcher stopped. The returned
// error is only about the call itself; command errors (including a lost
// connection) are on the commands.
func (b *Batcher) Do(ctx context.Context, cmds ...redis.Cmder) error {
	c, err := b.Start(ctx, cmds...)
	if err != nil {
		return err
	}
	return b.Wait(ctx, c)
}

// Pending is a call queued by Start; pass it to Wait exactly once.
type Pending = *call

// Start queues cmds for one of the next pipelines without waiting for the
// replies; the caller must call Wait on the result (unless Start failed).
// It lets a caller overlap a Redis round trip with other work.
func (b *Batcher) Start(ctx context.Context, cmds ...redis.Cmder) (Pending, error) {
	select {
	case <-b.stopped:
		return nil, ErrBatcherClosed
	default:
	}
	c := b.pool.Get().(*call)
	c.cmds = cmds
	return c, b.queue(ctx, c)
}

// DoMerged queues part for one of the next pipelines, merged with the
// other parts of m there (see Merger), and returns when m's Answer has
// given it its outcome, when ctx ends or when the batcher stopped. The
// returned error is only about the call itself; the part's outcome is
// where m.Answer puts it. After an error the part may still be sent and
// answered later: the caller must neither read nor reuse it.
func (b *Batcher) DoMerged(ctx context.Context, m Merger, part any) error {
	select {
	case <-b.stopped:
		return ErrBatcherClosed
	default:
	}
	c := b.pool.Get().(*call)
	c.merger, c.part = m, part
	if err := b.queue(ctx, c); err != nil {
		return err
	}
	return b.Wait(ctx, c)
}

// queue hands c to the flushers; on failure it returns c to the pool.
func (b *Batcher) queue(ctx context.Context, c *call) error {
	select {
	case b.in <- c:
		return nil
	case <-ctx.Done():
		c.reset()
		b.pool.Put(c)
		return ctx.Err()
	case <-b.stopped:
		c.reset()
		b.pool.Put(c)
		return ErrBatcherClosed
	}
}

func (c *call) reset() { c.cmds, c.merger, c.part = nil, nil, nil }

// Wait waits for the replies of c (see Do).
func (b *Batcher) Wait(ctx context.Context, c Pending) error {
	select {
	case <-c.done:
		c.reset()
		b.pool.Put(c)
		return nil
	case <-ctx.Done():
		// c stays with the flusher, which answers into its buffered
		// channel; it is not reused.
		return ctx.Err()
	case <-b.stopped:
		// Every flusher has returned; one that took c answered before.
		select {
		case <-c.done:
			return nil
		default:
			return ErrBatcherClosed
		}
	}
}

func (b *Batcher) flushLoop(ctx context.Context) {
	batch := make([]*call, 0, b.maxCmds)
	cmds := make([]redis.Cmder, 0, b.maxCmds)
	var groups []merged
	for {
		batch, cmds = batch[:0], cmds[:0]
		n := 0 // commands and parts gathered
		add := func(c *call) {
			batch = append(batch, c)
			if c.merger == nil {
				cmds = append(cmds, c.cmds...)
				n += len(c.cmds)
				return
			}
			n++
			for i := range groups {
				if groups[i].m == c.merger {
					groups[i].parts = append(groups[i].parts, c.part)
					return
				}
			}
			groups = append(groups, merged{m: c.merger, parts: []any{c.part}})
		}
		select {
		case c := <-b.in:
			add(c)
		case <-ctx.Done():
			return
		}
	gather:
		for n < b.maxCmds {
			select {
			case c := <-b.in:
				add(c)
			default:
				break gather
			}
		}
		b.send(cmds, groups)
		for i, c := range batch {
			c.done <- struct{}{}
			batch[i] = nil
		}
		clear(cmds)
		clear(groups)
		groups = groups[:0]
	}
}

// send sends cmds and the merged commands of groups in one pipeline and
// hands the groups' parts their answers. The merged commands go after the
// plain ones whatever the order the calls came in: the calls of one
// pipeline are concurrent, none waits for another.
func (b *Batcher) send(cmds []redis.Cmder, groups []merged) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	pipe := b.rdb.Pipeline()
	for _, cmd := range cmds {
		_ = pipe.Process(ctx, cmd)
	}
	type chunk struct {
		m     Merger
		parts []any
		cmds  []redis.Cmder
	}
	var chunks []chunk
	sent := len(cmds)
	for _, g := range groups {
		for p := g.parts; len(p) > 0; {
			k := min(len(p), mergeMax)
			c := chunk{m: g.m, parts: p[:k], cmds: g.m.Merge(ctx, p[:k])}
			for _, cmd := range c.cmds {
				_ = pipe.Process(ctx, cmd)
			}
			sent += len(c.cmds)
			chunks = append(chunks, c)
			p = p[k:]
		}
	}
	if b.size != nil {
		b.size.Observe(float64(sent))
	}
	// Errors land on the commands themselves.
	_, _ = pipe.Exec(ctx)
	for _, c := range chunks {
		c.m.Answer(c.cmds, c.parts)
	}
}

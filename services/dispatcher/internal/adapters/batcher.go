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
// Do is safe for concurrent use. Run the batcher with Run; Do fails with
// ErrBatcherClosed after Run returned.
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
	cmds []redis.Cmder
	done chan struct{} // buffered 1: the flusher never blocks on an abandoned call
}

// NewBatcher returns a batcher over rdb sending at most maxCmds commands per
// pipeline with up to pipelines pipelines in flight, each bounded by
// timeout. size observes the commands per pipeline (nil: not observed).
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
	select {
	case b.in <- c:
		return c, nil
	case <-ctx.Done():
		c.cmds = nil
		b.pool.Put(c)
		return nil, ctx.Err()
	case <-b.stopped:
		c.cmds = nil
		b.pool.Put(c)
		return nil, ErrBatcherClosed
	}
}

// Wait waits for the replies of c (see Do).
func (b *Batcher) Wait(ctx context.Context, c Pending) error {
	select {
	case <-c.done:
		c.cmds = nil
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
	for {
		batch, cmds = batch[:0], cmds[:0]
		select {
		case c := <-b.in:
			batch = append(batch, c)
			cmds = append(cmds, c.cmds...)
		case <-ctx.Done():
			return
		}
	gather:
		for len(cmds) < b.maxCmds {
			select {
			case c := <-b.in:
				batch = append(batch, c)
				cmds = append(cmds, c.cmds...)
			default:
				break gather
			}
		}
		b.send(cmds)
		for i, c := range batch {
			c.done <- struct{}{}
			batch[i] = nil
		}
		clear(cmds)
	}
}

func (b *Batcher) send(cmds []redis.Cmder) {
	if b.size != nil {
		b.size.Observe(float64(len(cmds)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	pipe := b.rdb.Pipeline()
	for _, cmd := range cmds {
		_ = pipe.Process(ctx, cmd)
	}
	// Errors land on the commands themselves.
	_, _ = pipe.Exec(ctx)
}

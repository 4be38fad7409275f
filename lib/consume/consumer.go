package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
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

	// Test hooks, nil in production: beforeStart is called with each
	// generation before its function is started, onGeneration with the
	// id of each generation whose function runs.
	beforeStart  func(gen *kafka.Generation)
	onGeneration func(id int32)
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
	// prev is closed once the previous generation's function returned.
	var prev <-chan struct{} = closedChan()
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
		<-prev
		prev = c.startGeneration(ctx, gen, log)
	}
	<-prev
	<-closed
	log.Info("left consumer group")
	return nil
}

// startGeneration runs gen's function and returns a channel closed once it
// returned. kafka-go waits for a generation's functions before it joins the
// next generation, except for a function started after the generation
// ended: that one it runs untracked, and it would overlap the next
// generation, handling and committing the same partitions twice at once.
// The function therefore does nothing when its generation ended before it
// began; nothing was fetched under it, so nothing is lost (the next
// generation starts from the committed offsets).
func (c *Consumer[T]) startGeneration(ctx context.Context, gen *kafka.Generation, log *slog.Logger) <-chan struct{} {
	done := make(chan struct{})
	if c.beforeStart != nil {
		c.beforeStart(gen)
	}
	gen.Start(func(gctx context.Context) {
		defer close(done)
		if gctx.Err() != nil {
			log.Info("generation ended before it started; skipped", "generation", gen.ID)
			return
		}
		if c.onGeneration != nil {
			c.onGeneration(gen.ID)
		}
		c.runGeneration(ctx, gctx, gen)
	})
	return done
}

func closedChan() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

package adapters

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/notiflow/notiflow/lib/kafkax"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

// ErrResultsClosed is returned by Publish once the publisher has stopped.
var ErrResultsClosed = errors.New("result publisher stopped")

// Results publishes NotificationDispatched events (key = recipient id,
// contract headers). Like the Redis batcher, it collects the results of
// all concurrently running records: each flusher takes what is queued (up
// to a batch) and writes it with one WriteMessages call, which costs the
// writer far less per record than one call per result. Publish is safe for
// concurrent use; run the flushers with Run.
type Results struct {
	w        *kafka.Writer
	topic    string
	maxBytes int
	in       chan *pendingResult
	stopped  chan struct{}
	flushers int
	maxBatch int

	headers sync.Map // run id -> []kafka.Header, shared read-only
	cached  atomic.Int64
}

type pendingResult struct {
	msg  kafka.Message
	err  error
	done chan struct{} // buffered 1
}

// NewResults returns a publisher writing to topic with w (not closed by
// Results); maxMessageBytes bounds one record (larger bodies are cut).
func NewResults(w *kafka.Writer, topic string, maxMessageBytes int) *Results {
	const flushers, maxBatch = 8, 1000
	return &Results{
		w: w, topic: topic, maxBytes: maxMessageBytes, flushers: flushers, maxBatch: maxBatch,
		in: make(chan *pendingResult, flushers*maxBatch), stopped: make(chan struct{}),
	}
}

// Run writes batches until ctx ends. Stop it only after every Publish
// caller is finished. It returns nil.
func (r *Results) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range r.flushers {
		wg.Go(func() { r.flushLoop(ctx) })
	}
	wg.Wait()
	close(r.stopped)
	return nil
}

func (r *Results) flushLoop(ctx context.Context) {
	batch := make([]*pendingResult, 0, r.maxBatch)
	msgs := make([]kafka.Message, 0, r.maxBatch)
	for {
		batch, msgs = batch[:0], msgs[:0]
		select {
		case p := <-r.in:
			batch = append(batch, p)
		case <-ctx.Done():
			return
		}
	gather:
		for len(batch) < r.maxBatch {
			select {
			case p := <-r.in:
				batch = append(batch, p)
			default:
				break gather
			}
		}
		for _, p := range batch {
			msgs = append(msgs, p.msg)
		}
		// Not ctx: a batch taken is always finished (the writer gives up
		// by itself after its attempts).
		err := r.w.WriteMessages(context.Background(), msgs...)
		var werrs kafka.WriteErrors
		perMsg := errors.As(err, &werrs) && len(werrs) == len(batch)
		for i, p := range batch {
			p.err = err
			if perMsg {
				p.err = werrs[i]
			}
			p.done <- struct{}{}
			batch[i] = nil
		}
		clear(msgs)
	}
}

// contractHeaders returns the (immutable, shared) contract headers for
// runID, built once per run id; the cache is reset when it grows large.
func (r *Results) contractHeaders(runID string) []kafka.Header {
	if h, ok := r.headers.Load(runID); ok {
		return h.([]kafka.Header)
	}
	h := kafkax.ContractHeaders(runID)
	if r.cached.Add(1) > 4096 {
		r.headers.Clear()
		r.cached.Store(0)
	}
	r.headers.Store(runID, h)
	return h
}

// Publish writes res and returns once Kafka acknowledged it (acks=all),
// ctx ended or the publisher stopped. A body that would make the record
// larger than the limit is cut, and the result's error says so.
func (r *Results) Publish(ctx context.Context, res *notiflowv1.NotificationDispatched) error {
	value, err := proto.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode result of %s: %w", res.NotificationId, err)
	}
	if over := len(value) + len(res.RecipientId) + 1024 - r.maxBytes; over > 0 {
		value, err = truncated(res, over)
		if err != nil {
			return err
		}
	}
	p := &pendingResult{
		msg:  kafka.Message{Topic: r.topic, Key: []byte(res.RecipientId), Value: value, Headers: r.contractHeaders(res.RunId)},
		done: make(chan struct{}, 1),
	}
	select {
	case <-r.stopped:
		return ErrResultsClosed
	default:
	}
	select {
	case r.in <- p:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.stopped:
		return ErrResultsClosed
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.stopped:
		select {
		case <-p.done:
		default:
			return ErrResultsClosed
		}
	}
	if p.err != nil {
		return fmt.Errorf("publish result of %s to %s: %w", res.NotificationId, r.topic, p.err)
	}
	return nil
}

// truncated cuts over bytes (and a margin) off res.Body, notes it in
// res.Error and encodes res again.
func truncated(res *notiflowv1.NotificationDispatched, over int) ([]byte, error) {
	cut := max(len(res.Body)-over-64, 0)
	for cut > 0 && !utf8.RuneStart(res.Body[cut]) {
		cut--
	}
	res.Error += fmt.Sprintf(" (body of %d bytes cut to %d to fit the record size limit)", len(res.Body), cut)
	res.Body = res.Body[:cut]
	value, err := proto.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("encode result of %s: %w", res.NotificationId, err)
	}
	return value, nil
}

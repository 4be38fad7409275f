// Package dispatchtest holds helpers for the dispatcher's end-to-end tests
// and benchmarks: producing due notifications, collecting the results and
// dead letters from Kafka, a recording webhook receiver and a TCP proxy that
// can take Redis away. Test code only.
package dispatchtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/notiflow/notiflow/lib/kafkax"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

// Produce writes dues in order (key = recipient id, contract headers) and
// returns once Kafka acknowledged them all.
func Produce(tb testing.TB, brokers []string, topic string, dues []*notiflowv1.NotificationDue) {
	tb.Helper()
	w := kafkax.NewWriter(brokers, kafkax.WriterOptions{BatchSize: 5000, BatchTimeout: 5 * time.Millisecond})
	defer w.Close()
	const chunk = 5000
	// Chunks are written one after the other so that a recipient's
	// records keep their order.
	for lo := 0; lo < len(dues); lo += chunk {
		hi := min(lo+chunk, len(dues))
		msgs := make([]kafka.Message, 0, hi-lo)
		for _, d := range dues[lo:hi] {
			v, err := proto.Marshal(d)
			if err != nil {
				tb.Fatalf("marshal due: %v", err)
			}
			msgs = append(msgs, kafka.Message{Topic: topic, Key: []byte(d.RecipientId), Value: v, Headers: kafkax.ContractHeaders(d.RunId)})
		}
		if err := w.WriteMessages(context.Background(), msgs...); err != nil {
			tb.Fatalf("produce %d due records: %v", len(msgs), err)
		}
	}
}

// Record is one record read back from a topic.
type Record struct {
	Partition int
	Offset    int64
	Key       string
	Headers   []kafka.Header
	Value     []byte
	Time      time.Time // when it was read
}

// Collector reads every partition of a topic from the beginning in the
// background and keeps what it read, in offset order per partition.
type Collector struct {
	mu      sync.Mutex
	recs    []Record
	changed chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// Collect starts a Collector on topic; it stops when the test ends.
func Collect(tb testing.TB, brokers []string, topic string, partitions int) *Collector {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Collector{cancel: cancel, changed: make(chan struct{}, 1)}
	for p := range partitions {
		c.wg.Go(func() {
			r := kafka.NewReader(kafka.ReaderConfig{
				Brokers: brokers, Topic: topic, Partition: p, MinBytes: 1, MaxBytes: 8 << 20,
				MaxWait: 100 * time.Millisecond, QueueCapacity: 1000,
			})
			defer r.Close()
			_ = r.SetOffset(kafka.FirstOffset)
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					time.Sleep(50 * time.Millisecond)
					continue
				}
				c.mu.Lock()
				c.recs = append(c.recs, Record{Partition: m.Partition, Offset: m.Offset, Key: string(m.Key), Headers: m.Headers, Value: m.Value, Time: time.Now()})
				c.mu.Unlock()
				select {
				case c.changed <- struct{}{}:
				default:
				}
			}
		})
	}
	tb.Cleanup(c.Stop)
	return c
}

// Stop stops reading.
func (c *Collector) Stop() { c.cancel(); c.wg.Wait() }

// Len is the number of records read so far.
func (c *Collector) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.recs)
}

// Records returns a copy of what was read so far.
func (c *Collector) Records() []Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Record(nil), c.recs...)
}

// WaitLen waits until at least n records were read; it fails the test
// after timeout.
func (c *Collector) WaitLen(tb testing.TB, n int, timeout time.Duration) []Record {
	tb.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		if c.Len() >= n {
			return c.Records()
		}
		select {
		case <-c.changed:
		case <-time.After(50 * time.Millisecond):
		case <-deadline.C:
			tb.Fatalf("read %d records within %s, want %d", c.Len(), timeout, n)
		}
	}
}

// Results decodes records of the results topic.
func Results(tb testing.TB, recs []Record) []*notiflowv1.NotificationDispatched {
	tb.Helper()
	out := make([]*notiflowv1.NotificationDispatched, len(recs))
	for i, r := range recs {
		var d notiflowv1.NotificationDispatched
		if err := proto.Unmarshal(r.Value, &d); err != nil {
			tb.Fatalf("decode result at %d/%d: %v", r.Partition, r.Offset, err)
		}
		out[i] = &d
	}
	return out
}

// Proxy forwards TCP connections to a target address and can be taken
// down (listener closed, connections cut) and brought back on the same
// port: a real outage of the target as seen by its clients.
type Proxy struct {
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewProxy starts a proxy to target on a free loopback port.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p := &Proxy{target: target, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("proxy listen: %v", err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	tb.Cleanup(func() { p.Down(); p.wg.Wait() })
	return p
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = struct{}{}, struct{}{}
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				_ = dst.Close()
				_ = src.Close()
				p.mu.Lock()
				delete(p.conns, dst)
				delete(p.conns, src)
				p.mu.Unlock()
			}
			p.wg.Go(func() { pipe(up, c) })
			p.wg.Go(func() { pipe(c, up) })
		}
	})
}

// Down closes the listener (new connections are refused) and cuts every
// open connection.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
}

// Up listens again on the same port.
func (p *Proxy) Up(tb testing.TB) {
	tb.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the port may linger briefly after Down
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		tb.Fatalf("proxy relisten on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// Due builds a NotificationDue for tests.
func Due(id, recipient string, seq uint64, ch notiflowv1.Channel, template, url, runID string) *notiflowv1.NotificationDue {
	now := time.Now()
	return &notiflowv1.NotificationDue{
		NotificationId: id, TargetId: seq + 1, RecipientId: recipient, Channel: ch, TemplateId: template,
		ParamsJson: []byte(`{"n":` + strconv.FormatUint(seq, 10) + `}`), WebhookUrl: url,
		DueAtUs: now.UnixMicro(), OccurrenceAtUs: now.UnixMicro() + int64(seq), Sequence: seq, RunId: runID,
		CreatedAtUs: now.UnixMicro(),
	}
}

// CheckOrder verifies that per recipient the sequences, in the order
// given, are strictly increasing. It returns the first violation.
func CheckOrder(recipients []string, seqs []uint64) error {
	last := map[string]uint64{}
	seen := map[string]bool{}
	for i, r := range recipients {
		if seen[r] && seqs[i] <= last[r] {
			return fmt.Errorf("recipient %s: sequence %d after %d", r, seqs[i], last[r])
		}
		seen[r], last[r] = true, seqs[i]
	}
	return nil
}

// EndOffsets returns the sum of the end offsets (high watermarks) of the
// topic's partitions: the number of records acknowledged so far on a fresh
// topic, without reading them.
func EndOffsets(ctx context.Context, brokers []string, topic string, partitions int) (int64, error) {
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 5 * time.Second}
	reqs := make([]kafka.OffsetRequest, partitions)
	for p := range reqs {
		reqs[p] = kafka.LastOffsetOf(p)
	}
	resp, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			return 0, p.Error
		}
		sum += p.LastOffset
	}
	return sum, nil
}

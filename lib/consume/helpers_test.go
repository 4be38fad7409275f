package consume

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
)

// seqRec is the decoded value used by these tests: "key|seq|padding".
type seqRec struct {
	key string
	seq int
}

func decodeSeq(m *kafka.Message) (seqRec, error) {
	parts := strings.SplitN(string(m.Value), "|", 3)
	if len(parts) < 2 {
		return seqRec{}, fmt.Errorf("want key|seq, got %q", m.Value)
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil {
		return seqRec{}, fmt.Errorf("bad sequence %q: %w", parts[1], err)
	}
	return seqRec{key: parts[0], seq: n}, nil
}

// produceSeq writes n records spread over keys round robin; record i has
// key k = i % keys and per-key sequence i / keys. Values are padded to size.
func produceSeq(tb testing.TB, brokers []string, topic string, n, keys, size int) {
	tb.Helper()
	w := kafkax.NewWriter(brokers, kafkax.WriterOptions{BatchSize: 5000, BatchTimeout: 5 * time.Millisecond})
	defer w.Close()
	const chunk = 5000
	// Chunks are written one after the other: concurrent writes could
	// reorder a key's records across chunks.
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		msgs := make([]kafka.Message, 0, hi-lo)
		for i := lo; i < hi; i++ {
			k := "k" + strconv.Itoa(i%keys)
			v := k + "|" + strconv.Itoa(i/keys) + "|"
			if pad := size - len(v); pad > 0 {
				v += strings.Repeat("x", pad)
			}
			msgs = append(msgs, kafka.Message{Topic: topic, Key: []byte(k), Value: []byte(v)})
		}
		if err := w.WriteMessages(context.Background(), msgs...); err != nil {
			tb.Fatalf("produce: %v", err)
		}
	}
}

// memDLQ is a DeadLetterer that keeps dead letters in memory, for tests that
// check what the runtime hands to the DLQ; tests of the real Kafka DLQ use
// kafkax.DeadLetter.
type memDLQ struct {
	mu   sync.Mutex
	recs []kafkax.DeadRecord
}

func (d *memDLQ) SendMany(_ context.Context, recs []kafkax.DeadRecord) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.recs = append(d.recs, recs...)
	return nil
}

// committed returns the group's committed offsets for topic, by partition.
func committed(tb testing.TB, brokers []string, group, topic string, partitions int) map[int]int64 {
	tb.Helper()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	ps := make([]int, partitions)
	for i := range ps {
		ps[i] = i
	}
	resp, err := client.OffsetFetch(context.Background(), &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ps}})
	if err != nil {
		tb.Fatalf("offset fetch: %v", err)
	}
	out := map[int]int64{}
	for _, p := range resp.Topics[topic] {
		out[p.Partition] = p.CommittedOffset
	}
	return out
}

func baseConfig(tb testing.TB, brokers []string, topic string) Config {
	return Config{
		Brokers: brokers, GroupID: testkit.Group(tb), Topics: []string{topic}, Service: "test",
		DLQ: &memDLQ{}, CommitInterval: 100 * time.Millisecond,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		DrainTimeout: 5 * time.Second,
	}
}

// runConsumer runs c in the background until the test ends; stop cancels
// it, waits for Run to return and fails the test if Run returned an error.
func runConsumer[T any](tb testing.TB, c *Consumer[T]) (stop func()) {
	tb.Helper()
	run := testkit.Go(tb, c.Run)
	return func() {
		if err := run.Stop(); err != nil {
			tb.Errorf("Run: %v", err)
		}
	}
}

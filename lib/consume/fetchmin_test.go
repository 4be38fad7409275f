package consume

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
)

// TestFetchMinBytesGathersATrickle: with FetchMinBytes above what a
// trickle of records carries, the broker holds each fetch for most of
// FetchMaxWait, so records produced one by one reach the handler together
// (one batch, although the batch's idle time is shorter than the gap
// between two records), and none is held back for good. With the default
// of 1 each record would come in a fetch of its own and, the idle time
// passing between two, in a batch of its own.
func TestFetchMinBytesGathersATrickle(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	topic := testkit.Topic(t, brokers, 1)
	const trickle, gap, wait = 20, 30 * time.Millisecond, 3 * time.Second // the broker holds a fetch 2 s of the wait
	var mu sync.Mutex
	var sizes []int
	total := 0
	cfg := baseConfig(t, brokers, topic)
	cfg.BatchSize, cfg.BatchIdle, cfg.BatchMaxAge = 1000, 10*time.Millisecond, 10*time.Second
	cfg.FetchMinBytes, cfg.FetchMaxWait = 1<<20, wait
	c, err := NewBatch(cfg, decodeSeq, BatchHandlerFunc[seqRec](func(_ context.Context, recs []*Record[seqRec]) error {
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(recs))
		total += len(recs)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, c)
	handled := func(n int) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			if total != n {
				return fmt.Errorf("%d of %d records handled, batches %v", total, n, sizes)
			}
			return nil
		}
	}
	w := kafkax.NewWriter(brokers, kafkax.WriterOptions{BatchTimeout: time.Millisecond})
	defer w.Close()
	produce := func(seq int) {
		if err := w.WriteMessages(context.Background(), kafka.Message{Topic: topic, Key: []byte("k"), Value: fmt.Appendf(nil, "k|%d|", seq)}); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	// A first record, handled once the consumer fetches: the trickle then
	// meets fetches in progress, not a backlog.
	produce(0)
	testkit.Eventually(t, 30*time.Second, handled(1))
	for i := 1; i <= trickle; i++ {
		time.Sleep(gap) // the trickle's pace, not a wait for a condition
		produce(i)
	}
	testkit.Eventually(t, 30*time.Second, handled(1+trickle))
	mu.Lock()
	defer mu.Unlock()
	largest := 0
	for _, s := range sizes[1:] {
		largest = max(largest, s)
	}
	if largest < 5 {
		t.Errorf("the trickle came in batches of %v, want records gathered by the fetch (a batch of at least 5)", sizes[1:])
	}
}

// TestConfigFetchMinBytes: FetchMinBytes defaults to 1 (answer at once)
// and must lie between 1 and FetchMaxBytes.
func TestConfigFetchMinBytes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		give, want int
		wantErr    string
	}{
		{give: 0, want: 1},
		{give: 64 << 10, want: 64 << 10},
		{give: DefaultFetchMaxBytes, want: DefaultFetchMaxBytes},
		{give: DefaultFetchMaxBytes + 1, wantErr: "FetchMinBytes 4194305 must be between 1 and FetchMaxBytes (4194304)"},
		{give: -1, wantErr: "FetchMinBytes -1"},
	} {
		cfg := Config{Brokers: []string{"x:9092"}, GroupID: "g", Topics: []string{"t"}, DLQ: &memDLQ{}, FetchMinBytes: tt.give}
		cfg.setDefaults()
		err := cfg.Validate()
		switch {
		case tt.wantErr != "" && (err == nil || !contains(err.Error(), tt.wantErr)):
			t.Errorf("FetchMinBytes %d: Validate() = %v, want an error containing %q", tt.give, err, tt.wantErr)
		case tt.wantErr == "" && err != nil:
			t.Errorf("FetchMinBytes %d: Validate() = %v", tt.give, err)
		case tt.wantErr == "" && cfg.FetchMinBytes != tt.want:
			t.Errorf("FetchMinBytes %d: set to %d, want %d", tt.give, cfg.FetchMinBytes, tt.want)
		}
	}
}

// TestStopWaitsForOneHeldFetch: a reader's Close waits for its fetch in
// progress, which the broker holds while a partition is idle; the
// generation closes its readers at once, so stopping a consumer of many
// idle partitions takes about one held fetch, not one per partition.
func TestStopWaitsForOneHeldFetch(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	const partitions, wait = 12, 3 * time.Second // kafka-go lets the broker hold a fetch 2 s of it
	topic := testkit.Topic(t, brokers, partitions)
	produceSeq(t, brokers, topic, 240, 240, 10) // every partition gets records
	var mu sync.Mutex
	total := 0
	cfg := baseConfig(t, brokers, topic)
	cfg.FetchMaxWait = wait
	c, err := New(cfg, decodeSeq, HandlerFunc[seqRec](func(context.Context, *Record[seqRec]) error {
		mu.Lock()
		defer mu.Unlock()
		total++
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	testkit.Eventually(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if total != 240 {
			return fmt.Errorf("%d of 240 records handled", total)
		}
		return nil
	})
	// Every record handled: each reader is in its next fetch, which the
	// broker holds, the partitions being idle.
	start := time.Now()
	stop()
	// One reader after the other would take up to a held fetch each,
	// about 12 s for 12 partitions; at once, about one (2 s).
	if took := time.Since(start); took > 6*time.Second {
		t.Errorf("stopping took %s, want about one held fetch (2 s) for %d idle partitions", took.Round(time.Millisecond), partitions)
	}
}

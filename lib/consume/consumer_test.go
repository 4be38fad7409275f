package consume

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
)

func TestNoCommitPastUnfinishedWork(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	topic := testkit.Topic(t, brokers, 1)
	const n, slow = 100, 10
	produceSeq(t, brokers, topic, n, n, 10) // every record its own key

	seen := make([]atomic.Int32, n)
	var done atomic.Int64
	cfg := baseConfig(t, brokers, topic)
	cfg.DrainTimeout = 500 * time.Millisecond
	// No ordering: with OrderKey a record whose key hashes to the slow
	// record's stripe (of 8,192, randomly seeded) waits behind it by design,
	// so "all but the slow one done" would fail about once in a hundred
	// runs. What this test checks, commits and the restart, does not
	// depend on ordering (the ordering tests cover it).
	cfg.Ordering = OrderNone
	c1, err := New(cfg, decodeSeq, HandlerFunc[seqRec](func(ctx context.Context, r *Record[seqRec]) error {
		if r.Msg.Offset == slow {
			<-ctx.Done() // held until the drain deadline cancels it
			return ctx.Err()
		}
		seen[r.Msg.Offset].Add(1)
		done.Add(1)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c1)
	testkit.Eventually(t, 30*time.Second, func() error {
		if d := done.Load(); d < n-1 {
			return fmt.Errorf("done %d of %d", d, n-1)
		}
		return nil
	})
	// Several commit intervals pass; the commit must stay at the slow record.
	time.Sleep(5 * cfg.CommitInterval) // let the periodic committer act; the assertion is that it did not move past
	if got := committed(t, brokers, cfg.GroupID, topic, 1)[0]; got > slow {
		t.Fatalf("committed %d while offset %d is unfinished", got, slow)
	}
	stop()
	if got := committed(t, brokers, cfg.GroupID, topic, 1)[0]; got != slow {
		t.Fatalf("after shutdown committed = %d, want %d", got, slow)
	}

	// A restart resumes at the unfinished record: nothing is skipped.
	c2, err := New(cfg, decodeSeq, HandlerFunc[seqRec](func(ctx context.Context, r *Record[seqRec]) error {
		seen[r.Msg.Offset].Add(1)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, c2)
	testkit.Eventually(t, 30*time.Second, func() error {
		for i := range seen {
			if seen[i].Load() == 0 {
				return fmt.Errorf("offset %d never handled", i)
			}
		}
		if got := committed(t, brokers, cfg.GroupID, topic, 1)[0]; got != n {
			return fmt.Errorf("committed %d, want %d", got, n)
		}
		return nil
	})
}

func TestDeadLetterAndSkip(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	topic := testkit.Topic(t, brokers, 1)
	dlqTopic := testkit.Topic(t, brokers, 1)

	w := kafkax.NewWriter(brokers, kafkax.WriterOptions{})
	defer w.Close()
	msgs := []kafka.Message{
		{Key: []byte("a"), Value: []byte("a|0|")},          // ok
		{Key: []byte("b"), Value: []byte("garbage")},       // undecodable
		{Key: []byte("c"), Value: []byte("c|0|fail")},      // keeps failing: retried, then dead lettered
		{Key: []byte("d"), Value: []byte("d|0|permanent")}, // permanent: dead lettered at once
		{Key: []byte("e"), Value: nil},                     // tombstone: skipped
		{Key: []byte("f"), Value: []byte("f|0|"), Headers: []kafka.Header{{Key: kafkax.HeaderSchemaVersion, Value: []byte("9")}}}, // unknown schema
		{Key: []byte("g"), Value: []byte("g|0|" + strings.Repeat("x", 2000))},                                                     // over MaxValueBytes
		{Key: []byte("a"), Value: []byte("a|1|")},                                                                                 // ok
	}
	for i := range msgs {
		msgs[i].Topic = topic
	}
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}

	var attemptsC, attemptsD, ok atomic.Int64
	cfg := baseConfig(t, brokers, topic)
	cfg.MaxAttempts = 3
	cfg.MaxValueBytes = 1024
	cfg.DLQ = kafkax.NewDeadLetter(w, dlqTopic, "test-svc")
	c, err := New(cfg, decodeSeq, HandlerFunc[seqRec](func(ctx context.Context, r *Record[seqRec]) error {
		switch r.Value.key {
		case "c":
			attemptsC.Add(1)
			return errors.New("provider down")
		case "d":
			attemptsD.Add(1)
			return Permanent(errors.New("unknown template"))
		}
		ok.Add(1)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, c)
	testkit.Eventually(t, 30*time.Second, func() error {
		if got := committed(t, brokers, cfg.GroupID, topic, 1)[0]; got != int64(len(msgs)) {
			return fmt.Errorf("committed %d, want %d", got, len(msgs))
		}
		return nil
	})
	if ok.Load() != 2 || attemptsC.Load() != 3 || attemptsD.Load() != 1 {
		t.Fatalf("ok=%d attemptsC=%d attemptsD=%d; want 2, 3, 1", ok.Load(), attemptsC.Load(), attemptsD.Load())
	}

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: dlqTopic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	want := map[string]struct{ reason, attempts, offset string }{
		"b": {"decode value", "0", "1"},
		"c": {"provider down", "3", "2"},
		"d": {"unknown template", "1", "3"},
		"f": {"unknown schema version", "0", "5"},
		"g": {"value over the size limit", "0", "6"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range want {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read DLQ: %v", err)
		}
		w, found := want[string(m.Key)]
		if !found {
			t.Fatalf("unexpected dead letter with key %q", m.Key)
		}
		h := func(k string) string { return string(kafkax.Header(m.Headers, k)) }
		if got := h(kafkax.HeaderDLQError); !contains(got, w.reason) {
			t.Errorf("key %s: error header %q, want it to contain %q", m.Key, got, w.reason)
		}
		if h(kafkax.HeaderDLQAttempts) != w.attempts || h(kafkax.HeaderDLQOffset) != w.offset ||
			h(kafkax.HeaderDLQTopic) != topic || h(kafkax.HeaderDLQPartition) != "0" ||
			h(kafkax.HeaderDLQService) != "test-svc" || h(kafkax.HeaderDLQTime) == "" {
			t.Errorf("key %s: headers %v", m.Key, m.Headers)
		}
		delete(want, string(m.Key))
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func TestBatchHandlerSizesAndIdleFlush(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	topic := testkit.Topic(t, brokers, 2)
	produceSeq(t, brokers, topic, 450, 45, 10)
	var mu sync.Mutex
	var sizes []int
	total := 0
	cfg := baseConfig(t, brokers, topic)
	cfg.BatchSize, cfg.BatchIdle = 200, 300*time.Millisecond
	failOnce := true
	c, err := NewBatch(cfg, decodeSeq, BatchHandlerFunc[seqRec](func(ctx context.Context, recs []*Record[seqRec]) error {
		mu.Lock()
		defer mu.Unlock()
		if failOnce { // the first attempt fails: the batch is retried whole
			failOnce = false
			return errors.New("database unavailable")
		}
		sizes = append(sizes, len(recs))
		total += len(recs)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, c)
	testkit.Eventually(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if total != 450 {
			return fmt.Errorf("total %d, sizes %v", total, sizes)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for _, s := range sizes {
		if s > 200 {
			t.Fatalf("batch of %d exceeds BatchSize 200 (sizes %v)", s, sizes)
		}
	}
	if err := c.Check(context.Background()); err != nil {
		t.Errorf("Check after recovery: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		offs := committed(t, brokers, cfg.GroupID, topic, 2)
		if offs[0]+offs[1] != 450 {
			return fmt.Errorf("committed %v", offs)
		}
		return nil
	})
}

// TestBackpressureBoundsMemory runs a slow handler against a backlog of one
// million records and checks that the heap stays under a fixed bound: the
// runtime must stop fetching instead of buffering the backlog.
func TestBackpressureBoundsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("produces one million records")
	}
	brokers := testkit.KafkaBrokers(t)
	topic := testkit.Topic(t, brokers, 12)
	const n = 1_000_000
	produceSeq(t, brokers, topic, n, 10_000, 100)
	runtime.GC()

	const heapBound = 64 << 20
	var handled atomic.Int64
	cfg := baseConfig(t, brokers, topic)
	cfg.Workers = 8
	c, err := New(cfg, decodeSeq, HandlerFunc[seqRec](func(ctx context.Context, r *Record[seqRec]) error {
		time.Sleep(time.Millisecond)
		handled.Add(1)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, c)
	var peak uint64
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
		time.Sleep(100 * time.Millisecond)
	}
	if handled.Load() == 0 {
		t.Fatal("nothing handled")
	}
	t.Logf("handled %d of %d in 8s; peak heap in use %.1f MiB (bound %d MiB)", handled.Load(), n, float64(peak)/(1<<20), heapBound>>20)
	if peak > heapBound {
		t.Fatalf("peak heap %d MiB exceeds %d MiB", peak>>20, heapBound>>20)
	}
}

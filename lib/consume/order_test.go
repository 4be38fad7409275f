package consume

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
)

// orderChecker records, per key, which sequences were handled and fails on
// a record handled before every lower sequence of its key was, or on two
// records of one key running at once.
type orderChecker struct {
	mu      sync.Mutex
	running map[string]bool
	next    map[string]int // lowest sequence not yet seen, per key
	seen    map[string]map[int]int
	handled atomic.Int64
	errs    []string
}

func newOrderChecker() *orderChecker {
	return &orderChecker{running: map[string]bool{}, next: map[string]int{}, seen: map[string]map[int]int{}}
}

func (o *orderChecker) begin(r seqRec) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.running[r.key] {
		o.errs = append(o.errs, fmt.Sprintf("key %s: two records at once", r.key))
	}
	o.running[r.key] = true
	if r.seq > o.next[r.key] {
		o.errs = append(o.errs, fmt.Sprintf("key %s: seq %d handled before seq %d", r.key, r.seq, o.next[r.key]))
	}
	if o.seen[r.key] == nil {
		o.seen[r.key] = map[int]int{}
	}
	o.seen[r.key][r.seq]++
	for o.seen[r.key][o.next[r.key]] > 0 {
		o.next[r.key]++
	}
}

func (o *orderChecker) end(r seqRec) {
	o.mu.Lock()
	o.running[r.key] = false
	o.mu.Unlock()
	o.handled.Add(1)
}

// complete reports an error unless every key saw sequences 0..perKey-1.
func (o *orderChecker) complete(keys, perKey int) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.errs) > 0 {
		return fmt.Errorf("%d ordering violations, first: %s", len(o.errs), o.errs[0])
	}
	for k := 0; k < keys; k++ {
		key := "k" + strconv.Itoa(k)
		if o.next[key] < perKey {
			return fmt.Errorf("key %s: contiguous up to %d, want %d", key, o.next[key], perKey)
		}
	}
	return nil
}

func (o *orderChecker) failures() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.errs...)
}

func TestKeyOrderUnderConcurrency(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	topic := testkit.Topic(t, brokers, 6)
	const n, keys = 12_000, 300
	produceSeq(t, brokers, topic, n, keys, 40)

	oc := newOrderChecker()
	var maxConcurrent, cur atomic.Int64
	cfg := baseConfig(t, brokers, topic)
	cfg.Workers = 32
	c, err := New(cfg, decodeSeq, HandlerFunc[seqRec](func(ctx context.Context, r *Record[seqRec]) error {
		oc.begin(r.Value)
		if v := cur.Add(1); v > maxConcurrent.Load() {
			maxConcurrent.Store(v)
		}
		time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		cur.Add(-1)
		oc.end(r.Value)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, c)
	testkit.Eventually(t, 60*time.Second, func() error { return oc.complete(keys, n/keys) })
	if f := oc.failures(); len(f) > 0 {
		t.Fatalf("%d ordering violations, first: %s", len(f), f[0])
	}
	// Keys ran in parallel beyond the 6 partitions.
	if m := maxConcurrent.Load(); m <= 6 {
		t.Errorf("max concurrent handlers = %d, want more than the partition count", m)
	}
	// Everything is committed eventually.
	testkit.Eventually(t, 10*time.Second, func() error {
		var sum int64
		for _, off := range committed(t, brokers, cfg.GroupID, topic, 6) {
			sum += off
		}
		if sum != n {
			return fmt.Errorf("committed sum %d, want %d", sum, n)
		}
		return nil
	})
}

// TestFastHandlerRunsInlineInOrder drives the fetchers' own path for short
// handlers (runInline): an instant handler, every 50th record failing its
// first attempt (retried by a worker with the stripe kept) and every 500th
// taking 50 ms (longer than takeOverAfter: another goroutine takes over
// the fetching). Per-key order holds, every record is handled, failed ones
// exactly twice, no more than Workers handlers run at once (fetchers and
// workers together), and everything is committed. A last slow record,
// produced once everything else is handled, finds every worker and its
// stripe free, so it runs on its fetcher and is taken over whatever the
// load did to the earlier slow records (which a busy machine can send to
// workers).
func TestFastHandlerRunsInlineInOrder(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	topic := testkit.Topic(t, brokers, 2)
	const n, keys = 20_000, 400
	const tail = n / keys // the last record's sequence number (key k0)
	produceSeq(t, brokers, topic, n, keys, 40)

	oc := newOrderChecker()
	var attempts sync.Map // "key/seq" -> *atomic.Int32
	cfg := baseConfig(t, brokers, topic)
	cfg.BackoffMin, cfg.BackoffMax = time.Millisecond, 5*time.Millisecond
	cfg.Workers = 3
	// Inline always: the moving average of handler time must not decide
	// whether the slow records run on a fetcher. On a loaded machine (the
	// race detector, parallel tests, two cores) an "instant" handler can
	// measure milliseconds, and each 50 ms record lifts the average by
	// more than 6 ms, so a bound near that sent every slow record to a
	// worker in one CI run and the takeover path went untested.
	cfg.InlineBelow = time.Hour
	var cur, peak atomic.Int64
	c, err := New(cfg, decodeSeq, HandlerFunc[seqRec](func(ctx context.Context, r *Record[seqRec]) error {
		n := cur.Add(1)
		defer cur.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		v, _ := attempts.LoadOrStore(r.Value.key+"/"+strconv.Itoa(r.Value.seq), new(atomic.Int32))
		try := v.(*atomic.Int32).Add(1)
		i := r.Value.seq*keys + mustAtoi(t, strings.TrimPrefix(r.Value.key, "k"))
		if i%50 == 7 && try == 1 {
			return errors.New("first attempt fails")
		}
		oc.begin(r.Value)
		if i%500 == 3 || r.Value.seq >= tail {
			time.Sleep(50 * time.Millisecond)
		}
		oc.end(r.Value)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, c)
	testkit.Eventually(t, 60*time.Second, func() error { return oc.complete(keys, n/keys) })
	if f := oc.failures(); len(f) > 0 {
		t.Fatalf("%d ordering violations, first: %s", len(f), f[0])
	}
	var twice, other int
	attempts.Range(func(k, v any) bool {
		switch v.(*atomic.Int32).Load() {
		case 1:
		case 2:
			twice++
		default:
			other++
		}
		return true
	})
	if twice != n/50 || other != 0 {
		t.Errorf("%d records tried twice (want %d), %d tried otherwise", twice, n/50, other)
	}
	if p := peak.Load(); p > int64(cfg.Workers) {
		t.Errorf("%d handlers ran at once, Workers = %d", p, cfg.Workers)
	}
	w := kafkax.NewWriter(brokers, kafkax.WriterOptions{})
	defer w.Close()
	if err := w.WriteMessages(context.Background(), kafka.Message{Topic: topic, Key: []byte("k0"),
		Value: []byte("k0|" + strconv.Itoa(tail) + "|")}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() error { return oc.complete(1, tail+1) })
	if got := testutil.ToFloat64(c.m.takeovers.WithLabelValues(cfg.GroupID)); got < 1 {
		t.Errorf("%v fetch takeovers: the slow records never ran on a fetcher", got)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		var sum int64
		for _, off := range committed(t, brokers, cfg.GroupID, topic, 2) {
			sum += off
		}
		if sum != n+1 {
			return fmt.Errorf("committed sum %d, want %d", sum, n+1)
		}
		return nil
	})
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPartitionModeRunsOnePerPartition(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	topic := testkit.Topic(t, brokers, 3)
	const n = 600
	produceSeq(t, brokers, topic, n, 50, 20)
	var mu sync.Mutex
	running := map[int]bool{}
	var violations, handled atomic.Int64
	lastOffset := map[int]int64{}
	cfg := baseConfig(t, brokers, topic)
	cfg.Ordering = OrderPartition
	c, err := New(cfg, decodeSeq, HandlerFunc[seqRec](func(ctx context.Context, r *Record[seqRec]) error {
		p := r.Msg.Partition
		mu.Lock()
		if running[p] {
			violations.Add(1)
		}
		if last, ok := lastOffset[p]; ok && r.Msg.Offset <= last {
			violations.Add(1)
		}
		running[p], lastOffset[p] = true, r.Msg.Offset
		mu.Unlock()
		time.Sleep(100 * time.Microsecond)
		mu.Lock()
		running[p] = false
		mu.Unlock()
		handled.Add(1)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, c)
	testkit.Eventually(t, 60*time.Second, func() error {
		if h := handled.Load(); h < n {
			return fmt.Errorf("handled %d of %d", h, n)
		}
		return nil
	})
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d partition-order violations", v)
	}
}

func TestRebalanceKeepsOrderAndCommitsMonotonic(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	const parts, n, keys = 6, 20_000, 200
	topic := testkit.Topic(t, brokers, parts)
	produceSeq(t, brokers, topic, n, keys, 30)

	oc := newOrderChecker()
	var byMember [2]atomic.Int64
	handler := func(member int) HandlerFunc[seqRec] {
		return func(ctx context.Context, r *Record[seqRec]) error {
			oc.begin(r.Value)
			time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
			oc.end(r.Value)
			byMember[member].Add(1)
			return nil
		}
	}
	cfg := baseConfig(t, brokers, topic)
	cfg.Workers = 4
	// A small in-flight window keeps most of the backlog in Kafka, so the
	// second member gets real work after the rebalance instead of the first
	// member draining everything it had already fetched.
	cfg.MaxInFlight, cfg.MaxInFlightPerPartition = 400, 100

	// Watch the committed offsets: they may only move forward.
	var watchErr atomic.Pointer[string]
	watchCtx, cancelWatch := context.WithCancel(context.Background())
	watchDone := make(chan struct{})
	stopWatch := func() { cancelWatch(); <-watchDone } // the watcher uses t: it ends before the test
	defer stopWatch()
	go func() {
		defer close(watchDone)
		last := map[int]int64{}
		for watchCtx.Err() == nil {
			for p, off := range committed(t, brokers, cfg.GroupID, topic, parts) {
				if prev, ok := last[p]; ok && off < prev {
					s := fmt.Sprintf("partition %d committed offset went back from %d to %d", p, last[p], off)
					watchErr.Store(&s)
				}
				if prev, ok := last[p]; !ok || off > prev {
					last[p] = off
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	c1, err := New(cfg, decodeSeq, handler(0))
	if err != nil {
		t.Fatal(err)
	}
	stop1 := runConsumer(t, c1)
	testkit.Eventually(t, 30*time.Second, func() error {
		if h := oc.handled.Load(); h < n/5 {
			return fmt.Errorf("handled %d", h)
		}
		return nil
	})
	c2, err := New(cfg, decodeSeq, handler(1))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, c2) // second member joins mid-stream
	testkit.Eventually(t, 30*time.Second, func() error {
		if h := byMember[1].Load(); h < n/10 {
			return fmt.Errorf("second member handled %d", h)
		}
		return nil
	})
	stop1() // first member leaves
	left := byMember[0].Load()
	testkit.Eventually(t, 60*time.Second, func() error { return oc.complete(keys, n/keys) })
	if f := oc.failures(); len(f) > 0 {
		t.Fatalf("%d ordering violations, first: %s", len(f), f[0])
	}
	testkit.Eventually(t, 15*time.Second, func() error {
		var sum int64
		for _, off := range committed(t, brokers, cfg.GroupID, topic, parts) {
			sum += off
		}
		if sum != n {
			return fmt.Errorf("committed sum %d, want %d", sum, n)
		}
		return nil
	})
	t.Logf("first member handled %d, second %d, total %d for %d records", left, byMember[1].Load(), oc.handled.Load(), n)
	if left+byMember[1].Load() < n {
		t.Errorf("handled %d+%d, want at least %d", left, byMember[1].Load(), n)
	}
	stopWatch()
	if e := watchErr.Load(); e != nil {
		t.Fatal(*e)
	}
}

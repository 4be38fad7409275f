package consume

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
)

// metricValue sums the samples of the counter or gauge name in reg; an
// error when reg has no such metric.
func metricValue(reg prometheus.Gatherer, name string) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, fmt.Errorf("gather metrics: %w", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
		return sum, nil
	}
	return 0, fmt.Errorf("no metric %s", name)
}

// readDeadLetters reads n records from the single partition of topic.
func readDeadLetters(tb testing.TB, brokers []string, topic string, n int) []kafka.Message {
	tb.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out := make([]kafka.Message, 0, n)
	for len(out) < n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			tb.Fatalf("read dead letter %d of %d: %v", len(out)+1, n, err)
		}
		out = append(out, m)
	}
	return out
}

// TestHandlerPanicIsDeadLettered runs a handler that panics on one record,
// on each path a handler runs on: a worker, the fetching goroutine (short
// handlers, see Config.InlineBelow) and a batch handler. The consumer keeps
// running, the record goes to the dead-letter topic at once (a panic is not
// retried) with the panic as its reason, the other records are handled (a
// batch handler's whole failing batch is dead lettered, as for any batch
// failing permanently), the panic is counted and the offsets are committed
// past the record.
func TestHandlerPanicIsDeadLettered(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		batch       bool
		inlineBelow time.Duration
	}{
		{name: "worker", inlineBelow: -1},
		// Every first attempt runs on the fetcher: the handler's starting
		// average (1 ms) is below the threshold and the stripes are idle.
		{name: "inline", inlineBelow: time.Hour},
		{name: "batch", batch: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			brokers := testkit.KafkaBrokers(t)
			topic := testkit.Topic(t, brokers, 1)
			dlqTopic := testkit.Topic(t, brokers, 1)
			const n, bad = 40, 17
			produceSeq(t, brokers, topic, n, n, 10) // record i has key k<i>, offset i

			w := kafkax.NewWriter(brokers, kafkax.WriterOptions{})
			defer w.Close()
			reg := prometheus.NewRegistry()
			cfg := baseConfig(t, brokers, topic)
			cfg.DLQ = kafkax.NewDeadLetter(w, dlqTopic, "test-svc")
			cfg.Registerer = reg
			var logs testkit.LogBuffer
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			cfg.InlineBelow = tt.inlineBelow
			cfg.BatchSize, cfg.BatchIdle = 8, 50*time.Millisecond
			badKey := "k" + strconv.Itoa(bad)
			var handled [n]atomic.Int32
			var c *Consumer[seqRec]
			var err error
			if tt.batch {
				c, err = NewBatch(cfg, decodeSeq, BatchHandlerFunc[seqRec](func(ctx context.Context, recs []*Record[seqRec]) error {
					for _, r := range recs {
						if r.Value.key == badKey {
							panic("boom at " + badKey)
						}
					}
					for _, r := range recs {
						handled[r.Msg.Offset].Add(1)
					}
					return nil
				}))
			} else {
				c, err = New(cfg, decodeSeq, HandlerFunc[seqRec](func(ctx context.Context, r *Record[seqRec]) error {
					if r.Value.key == badKey {
						panic("boom at " + badKey)
					}
					handled[r.Msg.Offset].Add(1)
					return nil
				}))
			}
			if err != nil {
				t.Fatal(err)
			}
			runConsumer(t, c)
			testkit.Eventually(t, 30*time.Second, func() error {
				if got := committed(t, brokers, cfg.GroupID, topic, 1)[0]; got != n {
					return fmt.Errorf("committed %d, want %d", got, n)
				}
				return nil
			})
			var notHandled int
			for i := range handled {
				switch got := handled[i].Load(); {
				case got > 1:
					t.Errorf("offset %d handled %d times", i, got)
				case got == 0:
					notHandled++
				}
			}
			if handled[bad].Load() != 0 {
				t.Errorf("the panicking record counts as handled")
			}
			if !tt.batch && notHandled != 1 {
				t.Errorf("%d records not handled, want only the panicking one", notHandled)
			}
			if tt.batch && notHandled > cfg.BatchSize {
				t.Errorf("%d records not handled, want at most one batch (%d)", notHandled, cfg.BatchSize)
			}
			// Every record not handled is on the dead-letter topic with the
			// panic as its reason, after a single attempt.
			foundBad := false
			for _, m := range readDeadLetters(t, brokers, dlqTopic, notHandled) {
				h := func(k string) string { return string(kafkax.Header(m.Headers, k)) }
				off, _ := strconv.Atoi(h(kafkax.HeaderDLQOffset))
				if handled[off].Load() != 0 {
					t.Errorf("offset %d both handled and dead lettered", off)
				}
				if got := h(kafkax.HeaderDLQError); !contains(got, "handler panicked") || !contains(got, "boom at "+badKey) {
					t.Errorf("offset %d: dead-letter reason %q, want the panic", off, got)
				}
				if got := h(kafkax.HeaderDLQAttempts); got != "1" {
					t.Errorf("offset %d: %s attempts, want 1 (a panic is not retried)", off, got)
				}
				foundBad = foundBad || string(m.Key) == badKey
			}
			if !foundBad {
				t.Errorf("the panicking record %s is not on the dead-letter topic", badKey)
			}
			// The stack is in the log, down to the handler's panic.
			if l := logs.String(); !contains(l, "handler panicked") || !contains(l, "panic_test.go") {
				t.Errorf("no panic with its stack in the log:\n%s", l)
			}
			t.Logf("%d record(s) dead lettered", notHandled)
			if got, err := metricValue(reg, "notiflow_consumer_handler_panics_total"); err != nil || got != 1 {
				t.Errorf("handler_panics_total = %v (%v), want 1", got, err)
			}
		})
	}
}

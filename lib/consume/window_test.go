package consume

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/notiflow/notiflow/lib/testkit"
)

// TestWindowBoundsUncommittedBehindStuckRecord holds one record's handler
// until released while the records after it on the same partition (other
// keys) complete. The partition's window, the records from the stuck one
// to the fetch position that a crash would redeliver, fills up to
// MaxUncommittedPerPartition and fetching pauses there: no record beyond
// the window reaches the handler, the consumed count stays put and the
// window gauge shows the bound. Once released, everything completes and is
// committed.
func TestWindowBoundsUncommittedBehindStuckRecord(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	topic := testkit.Topic(t, brokers, 1)
	const n, bound, stuck = 5000, 500, 10
	produceSeq(t, brokers, topic, n, n, 10) // record i has key k<i>, offset i

	reg := prometheus.NewRegistry()
	cfg := baseConfig(t, brokers, topic)
	cfg.Registerer = reg
	cfg.MaxInFlightPerPartition = 100
	cfg.MaxUncommittedPerPartition = bound
	release := make(chan struct{})
	var released atomic.Bool
	var handled [n]atomic.Int32
	var beyondMu sync.Mutex
	var beyond []int64 // offsets past the window handled while it was full
	c, err := New(cfg, decodeSeq, HandlerFunc[seqRec](func(ctx context.Context, r *Record[seqRec]) error {
		off := r.Msg.Offset
		if off == stuck {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if off >= stuck+bound && !released.Load() {
			beyondMu.Lock()
			beyond = append(beyond, off)
			beyondMu.Unlock()
		}
		handled[off].Add(1)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, c)

	consumed := func() (float64, error) { return metricValue(reg, "notiflow_consumer_records_consumed_total") }
	testkit.Eventually(t, 30*time.Second, func() error {
		got, err := consumed()
		if err != nil || got < stuck+bound {
			return fmt.Errorf("consumed %v (%v), want the window full: %d", got, err, stuck+bound)
		}
		return nil
	})
	// Fetching must stay paused; proving that nothing more arrives takes
	// a while: many fetch waits and commit intervals.
	time.Sleep(time.Second)
	got, err := consumed()
	if err != nil {
		t.Fatal(err)
	}
	beyondMu.Lock()
	past := append([]int64(nil), beyond...)
	beyondMu.Unlock()
	if len(past) > 0 || got != stuck+bound {
		t.Fatalf("with offset %d stuck: consumed %v records, want %d (window %d); %d records past the window handled, first %v",
			stuck, got, stuck+bound, bound, len(past), past[:min(len(past), 1)])
	}
	if w, err := metricValue(reg, "notiflow_consumer_uncommitted"); err != nil || w != bound {
		t.Errorf("uncommitted gauge = %v (%v), want %d", w, err, bound)
	}
	if off := committed(t, brokers, cfg.GroupID, topic, 1)[0]; off != stuck {
		t.Errorf("committed %d while offset %d is stuck", off, stuck)
	}

	released.Store(true)
	close(release)
	testkit.Eventually(t, 60*time.Second, func() error {
		for i := range handled {
			if handled[i].Load() == 0 {
				return fmt.Errorf("offset %d not handled", i)
			}
		}
		if off := committed(t, brokers, cfg.GroupID, topic, 1)[0]; off != n {
			return fmt.Errorf("committed %d, want %d", off, n)
		}
		return nil
	})
}

func TestConfigMaxUncommittedPerPartition(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		give    Config
		want    int
		wantErr string
	}{
		{name: "default", want: DefaultMaxUncommittedPerPartition},
		{name: "default follows a larger in-flight bound", give: Config{MaxInFlight: 100_000, MaxInFlightPerPartition: 50_000}, want: 50_000},
		{name: "set", give: Config{MaxUncommittedPerPartition: 5_000}, want: 5_000},
		{name: "below the in-flight bound", give: Config{MaxUncommittedPerPartition: 100}, wantErr: "MaxUncommittedPerPartition 100 must be at least MaxInFlightPerPartition 2000"},
		{name: "negative", give: Config{MaxUncommittedPerPartition: -1}, wantErr: "MaxUncommittedPerPartition -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := tt.give
			cfg.Brokers, cfg.GroupID, cfg.Topics, cfg.DLQ = []string{"x:9092"}, "g", []string{"t"}, &memDLQ{}
			cfg.setDefaults()
			err := cfg.Validate()
			if tt.wantErr != "" {
				if err == nil || !contains(err.Error(), tt.wantErr) {
					t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate() = %v", err)
			}
			if cfg.MaxUncommittedPerPartition != tt.want {
				t.Errorf("MaxUncommittedPerPartition = %d, want %d", cfg.MaxUncommittedPerPartition, tt.want)
			}
		})
	}
}

package consume

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/testkit"
)

// TestGenerationEndedBeforeStartIsNotRun holds the first member's Run loop
// between receiving its first generation and starting it, until a second
// member's join has ended that generation. kafka-go runs a function started
// on an ended generation without waiting for it before the next join, so
// running it would overlap the member's next generation on the same
// partitions. The member must skip it, and the two members must still
// handle every record.
func TestGenerationEndedBeforeStartIsNotRun(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	const parts, n, keys = 4, 2000, 40
	topic := testkit.Topic(t, brokers, parts)
	produceSeq(t, brokers, topic, n, keys, 20)

	var handled [n]atomic.Int32
	h := HandlerFunc[seqRec](func(_ context.Context, r *Record[seqRec]) error {
		handled[r.Value.seq*keys+keyIndex(r.Value.key)].Add(1)
		return nil
	})
	cfg := baseConfig(t, brokers, topic)
	c1, err := New(cfg, decodeSeq, h)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := New(cfg, decodeSeq, h)
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var ran []int32
	c1.onGeneration = func(id int32) {
		mu.Lock()
		ran = append(ran, id)
		mu.Unlock()
	}
	first := make(chan int32, 1)
	var held atomic.Bool
	c1.beforeStart = func(gen *kafka.Generation) {
		if !held.CompareAndSwap(false, true) {
			return
		}
		// A tracked probe learns when the generation ends.
		ended := make(chan struct{})
		gen.Start(func(ctx context.Context) {
			<-ctx.Done()
			close(ended)
		})
		runConsumer(t, c2) // the second member's join ends the generation
		select {
		case <-ended:
		case <-time.After(30 * time.Second):
			t.Errorf("generation %d not ended within 30s of the second member's start", gen.ID)
		}
		first <- gen.ID
	}
	runConsumer(t, c1)

	var firstID int32
	select {
	case firstID = <-first:
	case <-time.After(60 * time.Second):
		t.Fatal("first member received no generation within 60s")
	}
	testkit.Eventually(t, 60*time.Second, func() error {
		for i := range handled {
			if handled[i].Load() == 0 {
				return fmt.Errorf("record %d not handled", i)
			}
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(ran, firstID) {
		t.Fatalf("generation %d ran although it ended before it started (generations run: %v)", firstID, ran)
	}
	if len(ran) == 0 {
		t.Fatalf("first member ran no generation after generation %d", firstID)
	}
}

// keyIndex returns i of key "k<i>".
func keyIndex(key string) int {
	var i int
	_, _ = fmt.Sscanf(key, "k%d", &i)
	return i
}

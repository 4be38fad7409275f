package adapters

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
)

// TestSpansCoverOnlyTheWindow writes 50 records, then 3, then 50 to one
// partition and checks that the window of the 3 is read from their
// offsets only (ListOffsets by time), not from the start of the topic.
func TestSpansCoverOnlyTheWindow(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	topic := testkit.Topic(t, brokers, 1)
	w := kafkax.NewWriter(brokers, kafkax.WriterOptions{})
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	write := func(prefix string, n int) {
		msgs := make([]kafka.Message, n)
		for i := range msgs {
			msgs[i] = kafka.Message{Topic: topic, Key: []byte(fmt.Sprintf("%s%d", prefix, i)), Value: []byte("v")}
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	after := func() time.Time {
		b := time.Now().Truncate(time.Millisecond).Add(time.Millisecond)
		testkit.Eventually(t, time.Second, func() error {
			if time.Now().Before(b) {
				return fmt.Errorf("not yet")
			}
			return nil
		})
		return b
	}
	write("old", 50)
	from := after()
	write("in", 3)
	to := after()
	write("new", 50)

	l := NewTopicLog(brokers, topic)
	spans, err := l.spans(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 1 || spans[0].start != 50 || spans[0].end != 53 {
		t.Fatalf("spans %+v, want [50, 53) of partition 0", spans)
	}
	var got []string
	if err := l.Read(ctx, from, to, func(m kafka.Message) bool { got = append(got, string(m.Key)); return true }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[in0 in1 in2]" {
		t.Errorf("read %v", got)
	}
	// A window after the last record reads nothing.
	if spans, err := l.spans(ctx, after(), time.Now().Add(time.Hour)); err != nil || len(spans) != 0 {
		t.Errorf("empty window: %+v %v", spans, err)
	}
}

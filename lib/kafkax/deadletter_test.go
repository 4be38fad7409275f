package kafkax_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
)

// TestDeadLetterKeepsRedriveCount sends a redriven record (one carrying
// the redrive-* headers) to a real DLQ topic and reads it back: the dead
// letter keeps the count it carried, and ParseDeadLetter reads every
// dlq-* header. Redriving it again drops the old dlq-* and redrive-*
// headers, so no header appears twice.
func TestDeadLetterKeepsRedriveCount(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	topic := testkit.Topic(t, brokers, 1)
	w := kafkax.NewWriter(brokers, kafkax.WriterOptions{})
	defer w.Close()
	orig := kafka.Message{Topic: "notify.due.v1", Partition: 4, Offset: 77, Key: []byte("r1"), Value: []byte("v"),
		Headers: kafkax.RedriveHeaders(kafkax.ContractHeaders(""), 2, "dlq/0/5")}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkax.NewDeadLetter(w, topic, "dispatcher").Send(ctx, orig, errors.New("webhook 503"), 3); err != nil {
		t.Fatal(err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := kafkax.ParseDeadLetter(m.Headers)
	want := kafkax.DeadLetterInfo{Reason: "webhook 503", Service: "dispatcher", Topic: "notify.due.v1", Partition: 4, Offset: 77, Attempts: 3, Redrives: 2}
	if got != want {
		t.Errorf("ParseDeadLetter = %+v, want %+v", got, want)
	}
	again := kafkax.RedriveHeaders(m.Headers, got.Redrives+1, "x/0/1")
	seen := map[string]int{}
	for _, h := range again {
		seen[h.Key]++
		if len(h.Key) > 4 && h.Key[:4] == "dlq-" {
			t.Errorf("redrive kept %s", h.Key)
		}
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("header %s appears %d times", k, n)
		}
	}
	if c := kafkax.ParseDeadLetter(again).Redrives; c != 3 {
		t.Errorf("redrive count after the second redrive: %d, want 3", c)
	}
	if string(kafkax.Header(again, kafkax.HeaderContentType)) != kafkax.ContentTypeProtobuf {
		t.Errorf("contract headers lost: %v", again)
	}
}

// TestParseDeadLetterUnreadable covers headers that are missing or
// unreadable.
func TestParseDeadLetterUnreadable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give []kafka.Header
		want kafkax.DeadLetterInfo
	}{
		{"none", nil, kafkax.DeadLetterInfo{Partition: -1, Offset: -1}},
		{"bad count", []kafka.Header{{Key: kafkax.HeaderRedriveCount, Value: []byte("x")}}, kafkax.DeadLetterInfo{Partition: -1, Offset: -1, Redrives: -1}},
		{"truncated", []kafka.Header{{Key: kafkax.HeaderDLQTruncated, Value: []byte("2000000")}}, kafkax.DeadLetterInfo{Partition: -1, Offset: -1, Truncated: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := kafkax.ParseDeadLetter(tt.give); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

package adapters_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/adapters"
)

func TestLag(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	ctx := context.Background()
	due, dispatched := testkit.Topic(t, brokers, 3), testkit.Topic(t, brokers, 2)
	committing, idle := testkit.Group(t), testkit.Group(t)+"_idle"

	w := kafkax.NewWriter(brokers, kafkax.WriterOptions{})
	defer w.Close()
	var msgs []kafka.Message
	for i := 0; i < 30; i++ {
		msgs = append(msgs, kafka.Message{Topic: due, Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")})
	}
	for i := 0; i < 8; i++ {
		msgs = append(msgs, kafka.Message{Topic: dispatched, Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	lag := adapters.NewLag(client,
		adapters.GroupTopic{Group: committing, Topic: due},
		adapters.GroupTopic{Group: idle, Topic: dispatched})

	// Nothing committed: the lag is every record.
	got, err := lag.Sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got[committing] != 30 || got[idle] != 8 {
		t.Fatalf("lag = %v, want %s: 30, %s: 8", got, committing, idle)
	}

	// Commit, as a group without members may, the high watermark of
	// partition 0 and 1 less than that of partition 1.
	offs, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{
		due: {kafka.LastOffsetOf(0), kafka.LastOffsetOf(1), kafka.LastOffsetOf(2)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	hwm := map[int]int64{}
	for _, p := range offs.Topics[due] {
		hwm[p.Partition] = p.LastOffset
	}
	if hwm[1] == 0 {
		t.Fatal("premise: partition 1 got no record of 30 distinct keys")
	}
	res, err := client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{GroupID: committing, GenerationID: -1, Topics: map[string][]kafka.OffsetCommit{
		due: {{Partition: 0, Offset: hwm[0]}, {Partition: 1, Offset: hwm[1] - 1}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ps := range res.Topics {
		for _, p := range ps {
			if p.Error != nil {
				t.Fatalf("commit: %v", p.Error)
			}
		}
	}
	got, err = lag.Sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + hwm[2]; got[committing] != want || got[idle] != 8 {
		t.Fatalf("lag = %v, want %s: %d (1 on partition 1, all of partition 2)", got, committing, want)
	}
	if g := lag.Groups(); len(g) != 2 || g[0] != committing || g[1] != idle {
		t.Fatalf("groups = %v", g)
	}
}

package app_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/testkit"
)

// TestRelayKeepsOrderWhenAPublishPartlyFails relays 2,500 rows of one
// recipient over a 1-partition topic (more than one writer batch, by count
// or by bytes) while the broker refuses the first produce every time
// kafka-go's Writer tries it. That pass fails; the next one re-publishes
// from the cursor. Whatever the topic then holds, the first appearance of
// each sequence (what a deduplicating consumer acts on) must be increasing.
func TestRelayKeepsOrderWhenAPublishPartlyFails(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		batchBytes int64 // the writer's BatchBytes; 0 keeps kafkax's 1 MB
	}{
		{name: "rows over the batch size"},
		{name: "bytes over the batch bytes", batchBytes: 100_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1)
			ctx := context.Background()
			in := e.instance(t, instanceOpts{})
			faults := testkit.FailProduces(in.writer.MaxAttempts)
			in.writer.Transport = faults
			if tt.batchBytes > 0 {
				in.writer.BatchBytes = tt.batchBytes
			}
			cons := e.consume(t)
			const rows = 2500
			createDue(t, in.store, rows, 1, time.Now().Add(-time.Second), "run-order")
			in.sched.Tick(ctx) // claims, acquires the lease
			if n, err := in.sched.Flush(ctx); err == nil {
				t.Fatalf("first pass published %d and succeeded; want it to fail on the refused produce", n)
			}
			in.sched.Tick(ctx) // keeps (or takes again) the lease: Flush relays only under it
			if _, err := in.sched.Flush(ctx); err != nil {
				t.Fatalf("second pass: %v", err)
			}
			if _, unpub, _ := outboxCounts(t, in.store); unpub != 0 {
				t.Fatalf("unpublished rows after the second pass = %d, want 0", unpub)
			}
			t.Logf("produce requests: %d", faults.Produces())
			cons.waitDistinct(t, rows, 30*time.Second)
			checkFirstAppearances(t, cons, e.endOffsets(t))
		})
	}
}

// checkFirstAppearances waits until the consumer has read every record up
// to end (per partition), then checks that per recipient the first record
// of each sequence comes in increasing sequence order.
func checkFirstAppearances(t *testing.T, cons *consumer, end map[int]int64) {
	t.Helper()
	var want int64
	for _, n := range end {
		want += n
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		if _, total, _ := cons.counts(); int64(total) != want {
			return testkit.Errorf("consumed %d records, want %d", total, want)
		}
		return nil
	})
	var all []*dueRecord
	for id := range cons.ids() {
		all = append(all, cons.records(id)...)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].partition != all[j].partition {
			return all[i].partition < all[j].partition
		}
		return all[i].offset < all[j].offset
	})
	seen := map[uint64]bool{}
	last := map[string]*dueRecord{}
	bad := 0
	for _, r := range all {
		if seen[r.sequence] {
			continue
		}
		seen[r.sequence] = true
		if prev := last[r.key]; prev != nil && r.sequence < prev.sequence {
			if bad++; bad <= 3 {
				t.Errorf("recipient %s: sequence %d first appears at offset %d, after sequence %d at offset %d",
					r.key, r.sequence, r.offset, prev.sequence, prev.offset)
			}
		}
		if prev := last[r.key]; prev == nil || r.sequence > prev.sequence {
			last[r.key] = r
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d sequences first appear after a higher one of their recipient (%d records read)", bad, len(seen), len(all))
	}
}

// endOffsets returns the end offset of each partition of the env's topic.
func (e *env) endOffsets(tb testing.TB) map[int]int64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(e.brokers...)}
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{e.topic}})
	if err != nil || len(md.Topics) != 1 || md.Topics[0].Error != nil {
		tb.Fatalf("read metadata of %s: %v %+v", e.topic, err, md)
	}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for _, p := range md.Topics[0].Partitions {
		req.Topics[e.topic] = append(req.Topics[e.topic], kafka.LastOffsetOf(p.ID))
	}
	res, err := client.ListOffsets(ctx, req)
	if err != nil {
		tb.Fatalf("list offsets of %s: %v", e.topic, err)
	}
	end := map[int]int64{}
	for _, p := range res.Topics[e.topic] {
		if p.Error != nil {
			tb.Fatalf("list offsets of %s/%d: %v", e.topic, p.Partition, p.Error)
		}
		end[p.Partition] = p.LastOffset
	}
	return end
}

package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// limitMessageBytes sets the test topic's max.message.bytes and waits
// until the broker reports it.
func (e *env) limitMessageBytes(tb testing.TB, limit string) {
	tb.Helper()
	ctx := context.Background()
	client := &kafka.Client{Addr: kafka.TCP(e.brokers...), Timeout: 10 * time.Second}
	resp, err := client.AlterConfigs(ctx, &kafka.AlterConfigsRequest{Resources: []kafka.AlterConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: e.topic,
		Configs: []kafka.AlterConfigRequestConfig{{Name: "max.message.bytes", Value: limit}},
	}}})
	if err != nil {
		tb.Fatalf("alter topic config: %v", err)
	}
	for _, err := range resp.Errors {
		if err != nil {
			tb.Fatalf("alter topic config: %v", err)
		}
	}
	testkit.Eventually(tb, 30*time.Second, func() error {
		d, err := client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: e.topic, ConfigNames: []string{"max.message.bytes"},
		}}})
		if err != nil {
			return err
		}
		for _, r := range d.Resources {
			for _, c := range r.ConfigEntries {
				if c.ConfigName == "max.message.bytes" && c.ConfigValue == limit {
					return nil
				}
			}
		}
		return testkit.Errorf("max.message.bytes of %s is not %s yet", e.topic, limit)
	})
}

// TestRelayParksARecordTheBrokerRefuses relays seven rows of one recipient
// (one partition, so one produce batch) whose fourth the topic refuses as
// too large: that row is parked with its reason and the others are
// published, the cursor past them all.
func TestRelayParksARecordTheBrokerRefuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	e.limitMessageBytes(t, "20000")
	in := e.instance(t, instanceOpts{})
	cons := e.consume(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	now := time.Now()
	targets := make([]domain.Target, 7)
	for i := range targets {
		params := []byte(`{"i":1}`)
		if i == 3 {
			params = []byte(`{"blob":"` + strings.Repeat("x", 30000) + `"}`)
		}
		due := now.Add(-time.Minute + time.Duration(i)*time.Millisecond)
		tg, err := domain.NewTarget("rcpt-park", domain.ChannelSim, "", "tmpl", params, domain.OneShot(due), due, domain.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		tg.CreatedAt, tg.UpdatedAt = due, due
		targets[i] = tg
	}
	if _, err := in.store.CreateTargets(ctx, targets); err != nil {
		t.Fatal(err)
	}
	if res, err := in.store.ClaimDue(ctx, now, 10, domain.Planner{}); err != nil || res.Inserted != 7 {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	ids := outboxIDs(t, in.store, 1<<62)
	if _, err := in.relay.Drain(ctx); err != nil {
		t.Fatalf("relay pass: %v", err)
	}
	if cursor, err := in.store.PublishedUpTo(ctx); err != nil || cursor != ids[6] {
		t.Fatalf("cursor = %d, %v; want %d (past the refused row %d)", cursor, err, ids[6], ids[3])
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		seen := cons.sequences()
		for i, id := range ids {
			if i != 3 && !seen[id] {
				return testkit.Errorf("row %d is not in the topic", id)
			}
		}
		return nil
	})
	if cons.sequences()[ids[3]] {
		t.Fatalf("the refused row %d is in the topic", ids[3])
	}
	parked, err := in.store.ListParked(ctx, 0, 10)
	if err != nil || len(parked) != 1 {
		t.Fatalf("parked rows: %+v, %v; want row %d", parked, err, ids[3])
	}
	if p := parked[0]; p.Note.Sequence != ids[3] || p.Note.RecipientID != "rcpt-park" || p.Note.ID == "" ||
		!strings.Contains(p.Reason, "Message Size Too Large") {
		t.Fatalf("parked row: %+v; want row %d with the broker's reason", p, ids[3])
	}
	if n := value(in.metrics.Parked); n != 1 {
		t.Fatalf("parked rows counted: %v, want 1", n)
	}
	// Parking is durable: a later pass neither publishes nor parks again.
	if n, err := in.relay.Drain(ctx); err != nil || n != 0 {
		t.Fatalf("second pass: %d published, %v; want 0, nil", n, err)
	}
}

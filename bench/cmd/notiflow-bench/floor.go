package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/bench/harness"
	"github.com/notiflow/notiflow/lib/testkit"
)

// The batch sizes the floor writes in: the scheduler's claim and relay
// batches (NOTIFLOW_CLAIM_BATCH, NOTIFLOW_RELAY_BATCH defaults); the sink's
// is the run's own (-sink-batch).
const (
	floorClaimBatch = 5000
	floorRelayBatch = 5000
)

// floorSinkWriters is how many transactions of notifications rows the
// floor writes at once: the sink's flush concurrency
// (NOTIFLOW_FLUSH_CONCURRENCY, read from the environment the sink
// inherits, else its default). The outbox is written by one: the claims'
// outbox writes are serialised (the scheduler's outbox_lock).
func floorSinkWriters() int {
	if n, err := strconv.Atoi(os.Getenv("NOTIFLOW_FLUSH_CONCURRENCY")); err == nil && n > 0 {
		return n
	}
	return 4
}

// The orders the floor can write the notifications rows in
// (-floor-order), each the ORDER BY list of the copy's read; random
// shuffles the rows after reading them in key order.
const (
	floorOrderKey     = "key"
	floorOrderArrival = "arrival"
	floorOrderRandom  = "random"
)

var floorOrders = map[string]string{
	// The primary key: the least work, appending to the clustered index.
	floorOrderKey: "target_id, occurrence_at",
	// The order the run's sink wrote them in: by statement (the rows of
	// one INSERT share persisted_at), within one by notification id, as
	// the sink orders a batch (domain.Collapse). The floor cuts its
	// batches from this order, so they are the sink's statements where
	// the sink's flushes were all full.
	floorOrderArrival: "persisted_at, notification_id",
	floorOrderRandom:  "target_id, occurrence_at",
}

// floorClient names this process in the floor's CPU figures.
const floorClient = "bench"

// measureFloor runs the floor of a finished run on its database and stores
// the figures in res: the run's outbox rows written again in claim-sized
// transactions and read back in relay-sized pages, its notifications rows
// in sink-sized transactions (in the order o.FloorOrder names), as many
// at once as the sink flushes, and its number of records through two
// topics (see harness.Floor), all at once, with the services stopped. The
// floor's CPU is measured on the local dependencies (root's .deps) and on
// this process ("bench"), which does the services' part of the floor.
func measureFloor(ctx context.Context, res *result, root string, iso harness.Isolation, deps harness.Deps, o options) error {
	dsn, err := iso.DSN(deps)
	if err != nil {
		return err
	}
	n := int(res.Run.Report.Eligible)
	size, err := recordBytes(ctx, deps.Kafka, iso.TopicDue)
	if err != nil {
		return err
	}
	fmt.Printf("floor: %d notifications, records of %d bytes\n", n, size)
	cpu := testkit.DepPids(root)
	cpu[floorClient] = os.Getpid()
	f := &harness.Floor{
		DSN: dsn, Brokers: []string{deps.Kafka}, Redis: deps.Redis, Name: iso.Name,
		Tables: []harness.FloorTable{
			{Source: "outbox", Batch: floorClaimBatch, Writers: 1, ReadBack: floorRelayBatch, Key: "id", OrderBy: "id"},
			{Source: "notifications", Batch: o.SinkBatch, Writers: floorSinkWriters(),
				OrderBy: floorOrders[o.FloorOrder], Shuffle: o.FloorOrder == floorOrderRandom},
		},
		N: n, Partitions: o.Partitions, Consumers: o.Dispatchers, RecordBytes: size, CPU: cpu,
	}
	fr, err := f.Run(ctx)
	if err != nil {
		return err
	}
	res.Floor, res.FloorPerSecond = &fr, fr.PerSecond
	if fr.PerSecond > 0 {
		res.FloorRatio = float64(int(res.Run.Report.MsgsPerSecond/fr.PerSecond*1000)) / 1000
	}
	return nil
}

// recordBytes returns the size of the first record of topic's partition 0
// (the run's due records are all of one shape).
func recordBytes(ctx context.Context, broker, topic string) (int, error) {
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{broker}, Topic: topic, Partition: 0, MaxBytes: 1 << 20})
	defer r.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := r.FetchMessage(ctx)
	if err != nil {
		return 0, fmt.Errorf("floor: read a record of %s: %w", topic, err)
	}
	return len(m.Value), nil
}

package consume

import (
	"context"

	"errors"
	"fmt"
	"github.com/notiflow/notiflow/lib/kafkax"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

// Ordering says which records may run concurrently.
type Ordering int

const (
	// OrderKey runs records with the same key one at a time, in offset
	// order, and different keys in parallel. Records without a key are
	// ordered by partition.
	OrderKey Ordering = iota
	// OrderPartition runs one record at a time per partition.
	OrderPartition
	// OrderNone runs records in parallel with no ordering.
	OrderNone
)

// ParseOrdering maps "key", "partition" and "unordered" to an Ordering.
func ParseOrdering(s string) (Ordering, error) {
	switch s {
	case "key", "":
		return OrderKey, nil
	case "partition":
		return OrderPartition, nil
	case "unordered", "none":
		return OrderNone, nil
	}
	return 0, fmt.Errorf("unknown ordering %q: want key, partition or unordered", s)
}

func (o Ordering) String() string {
	switch o {
	case OrderKey:
		return "key"
	case OrderPartition:
		return "partition"
	case OrderNone:
		return "unordered"
	}
	return fmt.Sprintf("Ordering(%d)", int(o))
}

// Defaults of Config.
const (
	DefaultWorkers                 = 64
	DefaultMaxInFlight             = 10_000
	DefaultMaxInFlightPerPartition = 2_000
	DefaultCommitInterval          = 200 * time.Millisecond
	DefaultDrainTimeout            = 10 * time.Second
	DefaultMaxAttempts             = 5
	DefaultBackoffMin              = 100 * time.Millisecond
	DefaultBackoffMax              = 5 * time.Second
	DefaultBatchSize               = 200
	DefaultBatchIdle               = time.Second
	DefaultBatchMaxAge             = 3 * time.Second
	DefaultBatchConcurrency        = 1
	DefaultMaxValueBytes           = 1_000_000
	DefaultInlineBelow             = 20 * time.Microsecond
	DefaultFetchMinBytes           = 1
	DefaultFetchMaxBytes           = 4 << 20
	DefaultFetchMaxWait            = 250 * time.Millisecond
	DefaultSessionTimeout          = 10 * time.Second
	DefaultHeartbeatInterval       = time.Second
	DefaultRebalanceTimeout        = 30 * time.Second
)

// DefaultMaxUncommittedPerPartition is the default of
// Config.MaxUncommittedPerPartition: seconds of one busy partition's
// records, room for ordinary retries behind a slow record without pausing,
// and a bounded redelivery after a crash.
const DefaultMaxUncommittedPerPartition = 20_000

// DeadLetterer sends records that cannot be processed to the dead-letter
// topic and returns once they are durable. kafkax.DeadLetter implements it.
type DeadLetterer interface {
	SendMany(ctx context.Context, recs []kafkax.DeadRecord) error
}

// Config configures a Consumer. Brokers, GroupID, Topics, Service and DLQ
// are required; zero values elsewhere take the defaults above.
type Config struct {
	Brokers []string
	GroupID string
	Topics  []string
	// Service names the consuming service in dead-letter headers and logs.
	Service string

	Ordering Ordering
	// Workers is the number of records handled at once in this process
	// (per-record handlers).
	Workers int
	// MaxInFlight bounds records fetched but not done, per process.
	MaxInFlight int
	// MaxInFlightPerPartition bounds the same per partition.
	MaxInFlightPerPartition int
	// MaxUncommittedPerPartition bounds a partition's window: the records
	// from its first unfinished one to the fetch position, finished or
	// not, none of which can be committed yet. Fetching of a partition
	// pauses while its window is full, so a crash redelivers at most this
	// many records per partition plus those that left the window since the
	// last commit (see the package documentation). At least
	// MaxInFlightPerPartition; zero
	// takes the larger of DefaultMaxUncommittedPerPartition and
	// MaxInFlightPerPartition.
	MaxUncommittedPerPartition int
	// CommitInterval is how often completed offsets are committed.
	CommitInterval time.Duration
	// DrainTimeout bounds how long running handlers may take to finish at
	// generation end or shutdown; at most MaxDrainTimeout(HeartbeatInterval,
	// RebalanceTimeout). It may exceed SessionTimeout: the membership is
	// held by heartbeats while the generation drains.
	DrainTimeout time.Duration
	// StartOffset applies when the group has no committed offset:
	// kafka.FirstOffset (default) or kafka.LastOffset.
	StartOffset int64

	// MaxAttempts is how often a per-record handler is tried before the
	// record is dead lettered.
	MaxAttempts int
	// BatchMaxAttempts is how often a batch handler is tried before the
	// whole batch is dead lettered; 0 retries until it succeeds or the
	// consumer stops (the records stay uncommitted meanwhile).
	BatchMaxAttempts int
	BackoffMin       time.Duration
	BackoffMax       time.Duration

	// BatchSize, BatchIdle and BatchMaxAge shape batches for a
	// BatchHandler: a batch is handed over when it holds BatchSize records,
	// when no record arrived for BatchIdle, or when its oldest record has
	// waited BatchMaxAge.
	BatchSize   int
	BatchIdle   time.Duration
	BatchMaxAge time.Duration
	// BatchConcurrency is how many batches may be handled at once.
	BatchConcurrency int

	// InlineBelow: while the per-record handler's average duration is
	// under it, a fetcher runs a record itself instead of handing it to a
	// worker (see the package documentation). Default 20 us (handlers
	// that do no I/O); negative: never.
	InlineBelow time.Duration

	// MaxValueBytes is the largest value handed to the decoder; a larger
	// one is dead lettered as oversized. Default 1,000,000 (Kafka's own
	// default message limit).
	MaxValueBytes int

	// FetchMinBytes is the least data the broker gathers for one fetch
	// of a partition before it answers, unless the fetch's wait passes
	// first. Default 1: answer as soon as a record is there, for the
	// least latency. A larger value trades up to that wait of latency,
	// for every record of a partition that fills more slowly, for fewer
	// and fuller fetches. At most FetchMaxBytes.
	FetchMinBytes int
	FetchMaxBytes int
	// FetchMaxWait bounds one fetch: the broker holds a fetch waiting for
	// FetchMinBytes for kafka-go's share of it (three quarters of it
	// below 1 s, 1 s less from 1 s up, so very little just above 1 s),
	// and a reader's Close waits for a fetch in progress.
	FetchMaxWait      time.Duration
	SessionTimeout    time.Duration
	HeartbeatInterval time.Duration
	RebalanceTimeout  time.Duration

	// DLQ receives dead letters.
	DLQ DeadLetterer
	// Logger gets lifecycle events (never one line per record).
	Logger *slog.Logger
	// Registerer gets the consumer's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
}

func (c *Config) setDefaults() {
	setDefault(&c.Workers, DefaultWorkers)
	setDefault(&c.MaxInFlight, DefaultMaxInFlight)
	setDefault(&c.MaxInFlightPerPartition, DefaultMaxInFlightPerPartition)
	setDefault(&c.CommitInterval, DefaultCommitInterval)
	setDefault(&c.DrainTimeout, DefaultDrainTimeout)
	setDefault(&c.MaxAttempts, DefaultMaxAttempts)
	setDefault(&c.BackoffMin, DefaultBackoffMin)
	setDefault(&c.BackoffMax, DefaultBackoffMax)
	setDefault(&c.BatchSize, DefaultBatchSize)
	setDefault(&c.BatchIdle, DefaultBatchIdle)
	setDefault(&c.BatchMaxAge, DefaultBatchMaxAge)
	setDefault(&c.BatchConcurrency, DefaultBatchConcurrency)
	setDefault(&c.MaxValueBytes, DefaultMaxValueBytes)
	setDefault(&c.InlineBelow, DefaultInlineBelow)
	setDefault(&c.FetchMinBytes, DefaultFetchMinBytes)
	setDefault(&c.FetchMaxBytes, DefaultFetchMaxBytes)
	setDefault(&c.FetchMaxWait, DefaultFetchMaxWait)
	setDefault(&c.SessionTimeout, DefaultSessionTimeout)
	setDefault(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	setDefault(&c.RebalanceTimeout, DefaultRebalanceTimeout)
	if c.StartOffset == 0 {
		c.StartOffset = kafka.FirstOffset
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxInFlightPerPartition > c.MaxInFlight {
		c.MaxInFlightPerPartition = c.MaxInFlight
	}
	if c.MaxUncommittedPerPartition == 0 {
		c.MaxUncommittedPerPartition = max(DefaultMaxUncommittedPerPartition, c.MaxInFlightPerPartition)
	}
}

func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("consume: no brokers")
	case c.GroupID == "":
		return errors.New("consume: no group id")
	case len(c.Topics) == 0:
		return errors.New("consume: no topics")
	case c.DLQ == nil:
		return errors.New("consume: no dead-letter sink")
	case c.Workers < 1 || c.MaxInFlight < 1 || c.BatchSize < 1 || c.BatchConcurrency < 1:
		return errors.New("consume: workers, in-flight bounds, batch size and batch concurrency must be positive")
	case c.FetchMinBytes < 1 || c.FetchMinBytes > c.FetchMaxBytes:
		return fmt.Errorf("consume: FetchMinBytes %d must be between 1 and FetchMaxBytes (%d)", c.FetchMinBytes, c.FetchMaxBytes)
	case c.MaxUncommittedPerPartition < c.MaxInFlightPerPartition:
		return fmt.Errorf("consume: MaxUncommittedPerPartition %d must be at least MaxInFlightPerPartition %d", c.MaxUncommittedPerPartition, c.MaxInFlightPerPartition)
	case c.SessionTimeout < 3*c.HeartbeatInterval+DrainMargin:
		return fmt.Errorf("consume: SessionTimeout %s must be at least 3 HeartbeatIntervals (%s) plus DrainMargin (%s)",
			c.SessionTimeout, c.HeartbeatInterval, DrainMargin)
	case c.DrainTimeout > MaxDrainTimeout(c.HeartbeatInterval, c.RebalanceTimeout):
		return fmt.Errorf("consume: DrainTimeout %s must be at most RebalanceTimeout (%s) less HeartbeatInterval (%s) and DrainMargin (%s): %s",
			c.DrainTimeout, c.RebalanceTimeout, c.HeartbeatInterval, DrainMargin, MaxDrainTimeout(c.HeartbeatInterval, c.RebalanceTimeout))
	case c.StartOffset != kafka.FirstOffset && c.StartOffset != kafka.LastOffset:
		return errors.New("consume: start offset must be kafka.FirstOffset or kafka.LastOffset")
	}
	return nil
}

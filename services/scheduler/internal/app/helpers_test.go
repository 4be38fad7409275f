package app_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/scheduler/internal/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// env is one test's share of the real services: its own database, topic
// and lock key.
type env struct {
	dsn     string
	brokers []string
	topic   string
	redis   string
	lockKey string
}

func newEnv(tb testing.TB, partitions int) *env {
	tb.Helper()
	brokers := testkit.KafkaBrokers(tb)
	_, prefix := testkit.Redis(tb)
	e := &env{
		dsn:     testkit.MySQLDSN(tb),
		brokers: brokers,
		topic:   testkit.Topic(tb, brokers, partitions),
		redis:   testkit.RedisAddr(tb),
		lockKey: prefix + "scan",
	}
	s := e.store(tb)
	if err := s.Migrate(context.Background()); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return e
}

func (e *env) store(tb testing.TB) *adapters.MySQLStore {
	tb.Helper()
	s, err := adapters.OpenMySQL(context.Background(), e.dsn, 8)
	if err != nil {
		tb.Fatalf("open store: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// clock is a settable clock for deterministic tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time)     { c.mu.Lock(); c.t = t; c.mu.Unlock() }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// instance is one scheduler replica with its own connections.
type instance struct {
	store   *adapters.MySQLStore
	rdb     *redis.Client
	writer  *kafka.Writer
	leader  *app.Leader
	relay   *app.Relay
	sched   *app.Scheduler
	targets *app.Targets
	metrics *app.Metrics
	reg     *prometheus.Registry
}

type instanceOpts struct {
	tick       time.Duration
	claimBatch int
	relayBatch int
	lockTTL    time.Duration
	clock      func() time.Time
	policy     domain.MissedPolicy
}

func testLogger(tb testing.TB) *slog.Logger {
	if os.Getenv("NOTIFLOW_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", tb.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func (e *env) instance(tb testing.TB, o instanceOpts) *instance {
	tb.Helper()
	if o.tick == 0 {
		o.tick = 50 * time.Millisecond
	}
	if o.claimBatch == 0 {
		o.claimBatch = 5000
	}
	if o.relayBatch == 0 {
		o.relayBatch = 5000
	}
	if o.lockTTL == 0 {
		o.lockTTL = 3 * time.Second
	}
	if o.clock == nil {
		o.clock = time.Now
	}
	log := testLogger(tb)
	reg := prometheus.NewRegistry()
	m := app.NewMetrics(reg)
	in := &instance{store: e.store(tb), metrics: m, reg: reg}
	in.rdb = redis.NewClient(&redis.Options{Addr: e.redis})
	tb.Cleanup(func() { _ = in.rdb.Close() })
	in.writer = kafkax.NewWriter(e.brokers, kafkax.WriterOptions{})
	tb.Cleanup(func() { _ = in.writer.Close() })
	in.leader = app.NewLeader(app.RedisMutexes(in.rdb, e.lockKey, o.lockTTL), o.lockTTL, log, m)
	in.relay = app.NewRelay(in.store, adapters.NewDuePublisher(in.writer, e.topic), o.relayBatch, o.clock, m, log)
	in.sched = app.NewScheduler(in.leader, in.store, in.relay, in.store, app.SchedulerOptions{
		Tick: o.tick, ClaimBatch: o.claimBatch, Policy: o.policy, Retention: time.Hour,
		ShutdownTimeout: 10 * time.Second, Clock: o.clock,
	}, log, m)
	in.targets = app.NewTargets(in.store, domain.Limits{MaxParamsBytes: 16384}, 10000, o.clock)
	return in
}

// run starts the scheduler loop until the test ends; the returned stop
// cancels it and returns Run's error (testkit.Go).
func (in *instance) run(tb testing.TB) (stop func() error) {
	return testkit.Go(tb, in.sched.Run).Stop
}

func value(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

// consumer reads the test topic from the start and remembers every
// notification it saw.
type consumer struct {
	mu    sync.Mutex
	byID  map[string][]*dueRecord
	total int
	errs  []error
}

type dueRecord struct {
	id        string
	recipient string
	key       string
	sequence  uint64
	partition int
	offset    int64
	headers   map[string]string
	// secretRequired is NotificationDue.webhook_secret_required.
	secretRequired bool
}

func (e *env) consume(tb testing.TB) *consumer {
	tb.Helper()
	c := &consumer{byID: map[string][]*dueRecord{}}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: e.brokers, Topic: e.topic, GroupID: testkit.Group(tb),
		StartOffset: kafka.FirstOffset, MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 100 * time.Millisecond,
	})
	tb.Cleanup(func() { _ = r.Close() }) // after the reading loop stopped
	testkit.Go(tb, func(ctx context.Context) error {
		for {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				return nil // ctx ended (or the reader failed: the counts show it)
			}
			pb, err := adapters.DecodeDue(m.Value)
			c.mu.Lock()
			if err != nil {
				c.errs = append(c.errs, err)
			} else {
				h := map[string]string{}
				for _, x := range m.Headers {
					h[x.Key] = string(x.Value)
				}
				c.byID[pb.GetNotificationId()] = append(c.byID[pb.GetNotificationId()], &dueRecord{
					id: pb.GetNotificationId(), recipient: pb.GetRecipientId(), key: string(m.Key), sequence: pb.GetSequence(),
					partition: m.Partition, offset: m.Offset, headers: h, secretRequired: pb.GetWebhookSecretRequired(),
				})
				c.total++
			}
			c.mu.Unlock()
		}
	})
	return c
}

func (c *consumer) counts() (distinct, total int, errs []error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byID), c.total, append([]error(nil), c.errs...)
}

func (c *consumer) records(id string) []*dueRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*dueRecord(nil), c.byID[id]...)
}

func (c *consumer) ids() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.byID))
	for id, rs := range c.byID {
		out[id] = len(rs)
	}
	return out
}

// waitDistinct waits until the consumer saw want distinct notifications.
func (c *consumer) waitDistinct(tb testing.TB, want int, timeout time.Duration) {
	tb.Helper()
	testkit.Eventually(tb, timeout, func() error {
		d, total, errs := c.counts()
		if len(errs) > 0 {
			return testkit.Errorf("undecodable records: %v", errs[0])
		}
		if d != want {
			return testkit.Errorf("consumed %d distinct notifications (%d records), want %d", d, total, want)
		}
		return nil
	})
}

// createDue creates n one-shot sim targets due at due, over recipients
// recipients, with the store directly (fast, multi-row).
func createDue(tb testing.TB, s *adapters.MySQLStore, n, recipients int, due time.Time, runID string) []int64 {
	tb.Helper()
	ts := make([]domain.Target, n)
	for i := range ts {
		t, err := domain.NewTarget(recipientName(i%recipients), domain.ChannelSim, "", "bench", []byte(`{"i":1}`),
			domain.OneShot(due), due, domain.Limits{})
		if err != nil {
			tb.Fatal(err)
		}
		t.CreatedAt, t.UpdatedAt, t.RunID = due, due, runID
		ts[i] = t
	}
	var ids []int64
	for start := 0; start < n; start += 10000 {
		got, err := s.CreateTargets(context.Background(), ts[start:min(start+10000, n)])
		if err != nil {
			tb.Fatalf("create targets: %v", err)
		}
		ids = append(ids, got...)
	}
	return ids
}

func recipientName(i int) string { return "rcpt-" + itoa(i) }

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	p := len(b)
	for ; i > 0; i /= 10 {
		p--
		b[p] = byte('0' + i%10)
	}
	return string(b[p:])
}

// outboxCounts returns (rows, unpublished rows, distinct occurrences).
func outboxCounts(tb testing.TB, s *adapters.MySQLStore) (rows, unpublished, distinct int) {
	tb.Helper()
	err := s.DB().QueryRowContext(context.Background(),
		`SELECT COUNT(*), COALESCE(SUM(id > (SELECT published_id FROM outbox_relay WHERE id = 1)), 0), COUNT(DISTINCT target_id, occurrence_at) FROM outbox`).Scan(&rows, &unpublished, &distinct)
	if err != nil {
		tb.Fatalf("count outbox: %v", err)
	}
	return rows, unpublished, distinct
}

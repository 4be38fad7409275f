package service

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	libconfig "github.com/notiflow/notiflow/lib/config"
	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/sink/internal/config"
)

// env is one test's Kafka topics and database.
type env struct {
	brokers  []string
	topic    string // results
	dlqTopic string
	dsn      string
	dbName   string
	// db is a pool without a default database (queries name it), so that
	// a fault test can kill the sink's connections (DB = dbName) and only
	// those.
	db    *sql.DB
	table string // `dbName`.notifications
	runID string
}

func newEnv(tb testing.TB, partitions int) *env {
	tb.Helper()
	brokers := testkit.KafkaBrokers(tb)
	e := &env{
		brokers:  brokers,
		topic:    testkit.Topic(tb, brokers, partitions),
		dlqTopic: testkit.Topic(tb, brokers, 1),
		dsn:      testkit.MySQLDSN(tb),
		runID:    testkit.ID("run"),
	}
	mc, err := mysql.ParseDSN(e.dsn)
	if err != nil {
		tb.Fatal(err)
	}
	e.dbName = mc.DBName
	e.table = "`" + mc.DBName + "`.notifications"
	mc.DBName = ""
	db, err := sql.Open("mysql", mc.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	e.db = db
	return e
}

// testToken is the read API's bearer token in the tests.
const testToken = "test-token-not-a-secret"

// config returns the sink configuration of the test: its topics, database
// and group, a random HTTP port, the defaults elsewhere.
func (e *env) config(tb testing.TB) config.Config {
	tb.Helper()
	var cfg config.Config
	if err := libconfig.FillZero(&cfg); err != nil {
		tb.Fatal(err)
	}
	cfg.MySQLDSN = e.dsn
	cfg.Group = testkit.Group(tb)
	cfg.HTTPAddr = testkit.FreeAddr(tb)
	cfg.Kafka.Brokers = e.brokers
	cfg.Kafka.TopicDue = e.topic // unused by the sink; not the shared default
	cfg.Kafka.TopicDispatched = e.topic
	cfg.Kafka.TopicDLQ = e.dlqTopic
	cfg.ShutdownTimeout = 10 * time.Second
	cfg.RetryBackoffMax = 500 * time.Millisecond
	cfg.APIToken = testToken
	return cfg
}

// env returns cfg as environment variables for the sink binary.
func envVars(cfg config.Config) []string {
	return []string{
		"NOTIFLOW_HTTP_ADDR=" + cfg.HTTPAddr,
		"NOTIFLOW_LOG_LEVEL=warn",
		"NOTIFLOW_MYSQL_DSN=" + cfg.MySQLDSN,
		"NOTIFLOW_API_TOKEN=" + cfg.APIToken,
		"NOTIFLOW_GROUP=" + cfg.Group,
		fmt.Sprintf("NOTIFLOW_BATCH_SIZE=%d", cfg.BatchSize),
		"NOTIFLOW_BATCH_IDLE=" + cfg.BatchIdle.String(),
		"NOTIFLOW_BATCH_MAX_AGE=" + cfg.BatchMaxAge.String(),
		fmt.Sprintf("NOTIFLOW_FLUSH_CONCURRENCY=%d", cfg.FlushConcurrency),
		"NOTIFLOW_SHUTDOWN_TIMEOUT=" + cfg.ShutdownTimeout.String(),
		"NOTIFLOW_RETRY_BACKOFF_MAX=" + cfg.RetryBackoffMax.String(),
		"NOTIFLOW_KAFKA_BROKERS=" + strings.Join(cfg.Kafka.Brokers, ","),
		"NOTIFLOW_TOPIC_DUE=" + cfg.Kafka.TopicDue,
		"NOTIFLOW_TOPIC_DISPATCHED=" + cfg.Kafka.TopicDispatched,
		"NOTIFLOW_TOPIC_DLQ=" + cfg.Kafka.TopicDLQ,
		fmt.Sprintf("NOTIFLOW_SINK_NAIVE=%v", cfg.Naive),
	}
}

// running is a sink started in this process by start.
type running struct {
	*testkit.Background
	reg *prometheus.Registry
}

// start runs the sink in this process (New, then Run on cfg.HTTPAddr) until
// the test ends or Stop, which cancels it as SIGTERM does and returns Run's
// error.
func start(tb testing.TB, cfg config.Config) *running {
	tb.Helper()
	if err := cfg.Validate(); err != nil {
		tb.Fatal(err)
	}
	r := &running{reg: prometheus.NewRegistry()}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r.Background = testkit.Go(tb, func(ctx context.Context) error {
		s, err := New(ctx, cfg, log, r.reg)
		if err != nil {
			return err
		}
		return s.Run(ctx, nil)
	})
	return r
}

// metric returns the sum of the values of the named counter or gauge.
func (r *running) metric(name string) float64 {
	return gather(r.reg, name)
}

func gather(reg prometheus.Gatherer, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return -1
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += value(m)
		}
	}
	return sum
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// result returns the i-th result of the run: a delivered notification of
// recipient i%500 with a realistic body.
func (e *env) result(i int) *notiflowv1.NotificationDispatched {
	due := t0.Add(time.Duration(i) * time.Millisecond)
	return &notiflowv1.NotificationDispatched{
		NotificationId: notificationID(e.runID, i),
		TargetId:       uint64(1000 + i),
		OccurrenceAtUs: due.UnixMicro(),
		RecipientId:    fmt.Sprintf("user-%05d", i%500),
		Sequence:       uint64(i),
		Channel:        notiflowv1.Channel_CHANNEL_SIM,
		TemplateId:     "order-shipped",
		Status:         notiflowv1.Status_STATUS_DELIVERED,
		Attempts:       1,
		ProviderCode:   200,
		DueAtUs:        due.UnixMicro(),
		DispatchedAtUs: due.Add(3 * time.Millisecond).UnixMicro(),
		LatencyUs:      3000,
		RunId:          e.runID,
		Body:           fmt.Sprintf("Hello user-%05d, your order %d has shipped and will arrive on Tuesday.", i%500, i),
	}
}

// message encodes ev as a record of the contract (key = recipient).
func (e *env) message(tb testing.TB, ev *notiflowv1.NotificationDispatched) kafka.Message {
	tb.Helper()
	v, err := proto.Marshal(ev)
	if err != nil {
		tb.Fatal(err)
	}
	return kafka.Message{Topic: e.topic, Key: []byte(ev.GetRecipientId()), Value: v, Headers: kafkax.ContractHeaders(ev.GetRunId())}
}

// produce writes the events and returns once Kafka acknowledged them.
func (e *env) produce(tb testing.TB, evs ...*notiflowv1.NotificationDispatched) {
	tb.Helper()
	msgs := make([]kafka.Message, len(evs))
	for i, ev := range evs {
		msgs[i] = e.message(tb, ev)
	}
	e.produceMsgs(tb, msgs...)
}

func (e *env) produceMsgs(tb testing.TB, msgs ...kafka.Message) {
	tb.Helper()
	w := kafkax.NewWriter(e.brokers, kafkax.WriterOptions{BatchSize: 5000})
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(msgs) > 0 {
		n := min(len(msgs), 5000)
		if err := w.WriteMessages(ctx, msgs[:n]...); err != nil {
			tb.Fatalf("produce: %v", err)
		}
		msgs = msgs[n:]
	}
}

// rows counts the notification rows of the test's database.
func (e *env) rows(tb testing.TB) int {
	tb.Helper()
	n, err := e.count()
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func (e *env) count() (int, error) {
	var n int
	err := e.db.QueryRow(`SELECT COUNT(*) FROM ` + e.table).Scan(&n)
	return n, err
}

// waitRows waits until exactly want rows exist; more is a failure.
func (e *env) waitRows(tb testing.TB, want int, timeout time.Duration) {
	tb.Helper()
	testkit.Eventually(tb, timeout, func() error {
		n, err := e.count()
		if err != nil {
			return err
		}
		if n > want {
			tb.Fatalf("%d rows, more than the %d expected", n, want)
		}
		if n != want {
			return fmt.Errorf("%d rows, want %d", n, want)
		}
		return nil
	})
}

// committed returns the sum of the group's committed offsets on the
// results topic (records committed, as every partition starts at 0).
func (e *env) committed(group string, partitions int) (int64, error) {
	client := &kafka.Client{Addr: kafka.TCP(e.brokers...), Timeout: 5 * time.Second}
	ps := make([]int, partitions)
	for i := range ps {
		ps[i] = i
	}
	resp, err := client.OffsetFetch(context.Background(), &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{e.topic: ps}})
	if err != nil {
		return 0, err
	}
	if resp.Error != nil {
		return 0, resp.Error
	}
	var sum int64
	for _, p := range resp.Topics[e.topic] {
		if p.Error != nil {
			return 0, p.Error
		}
		if p.CommittedOffset > 0 {
			sum += p.CommittedOffset
		}
	}
	return sum, nil
}

// waitCommitted waits until the group committed want records.
func (e *env) waitCommitted(tb testing.TB, group string, partitions int, want int64) {
	tb.Helper()
	testkit.Eventually(tb, 30*time.Second, func() error {
		c, err := e.committed(group, partitions)
		if err != nil {
			return err
		}
		if c != want {
			return fmt.Errorf("committed %d records, want %d", c, want)
		}
		return nil
	})
}

// deadLetters reads the DLQ topic until it holds want records or timeout.
func (e *env) deadLetters(tb testing.TB, want int, timeout time.Duration) []kafka.Message {
	tb.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, Topic: e.dlqTopic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []kafka.Message
	for len(out) < want {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				tb.Fatalf("dead-letter topic: %d record(s) within %s, want %d", len(out), timeout, want)
			}
			tb.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// notificationID is a UUID-shaped id derived from the run and i by
// hashing, in no order (the scheduler's ids start with the occurrence
// time; random ones hit the unique index anywhere, the harder case).
func notificationID(runID string, i int) string {
	sum := sha256.Sum256([]byte(runID + "/" + strconv.Itoa(i)))
	h := hex.EncodeToString(sum[:16])
	return h[0:8] + "-" + h[8:12] + "-8" + h[13:16] + "-" + h[16:20] + "-" + h[20:32]
}

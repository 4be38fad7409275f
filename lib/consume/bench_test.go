package consume

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/testkit"
)

// Benchmarks need the local Kafka (make deps). Each sub-benchmark consumes
// the same pre-produced backlog with a fresh group, so the consumer is
// saturated from its first record; the rate is taken from the first to the
// last record handled, which leaves group-join time out of both sides.
//
//	go test -run '^$' -bench . -benchtime 1x -v ./consume/

// rateMeter measures records/s between the first and the n-th record.
type rateMeter struct {
	n     int64
	count atomic.Int64
	first atomic.Int64
	done  chan struct{}
	last  time.Time
	once  sync.Once
}

func newRateMeter(n int) *rateMeter { return &rateMeter{n: int64(n), done: make(chan struct{})} }

func (m *rateMeter) tick() {
	now := time.Now().UnixNano()
	m.first.CompareAndSwap(0, now)
	if m.count.Add(1) == m.n {
		m.once.Do(func() { m.last = time.Now(); close(m.done) })
	}
}

func (m *rateMeter) wait(b *testing.B, timeout time.Duration) float64 {
	b.Helper()
	select {
	case <-m.done:
	case <-time.After(timeout):
		b.Fatalf("handled %d of %d within %s", m.count.Load(), m.n, timeout)
	}
	secs := m.last.Sub(time.Unix(0, m.first.Load())).Seconds()
	return float64(m.n) / secs
}

func benchRuntime(b *testing.B, brokers []string, topic string, n int, mutate func(*Config), h func()) float64 {
	m := newRateMeter(n)
	cfg := baseConfig(b, brokers, topic)
	mutate(&cfg)
	c, err := New(cfg, func(msg *kafka.Message) ([]byte, error) { return msg.Value, nil },
		HandlerFunc[[]byte](func(ctx context.Context, r *Record[[]byte]) error {
			h()
			m.tick()
			return nil
		}))
	if err != nil {
		b.Fatal(err)
	}
	stop := runConsumer(b, c)
	defer stop()
	return m.wait(b, 5*time.Minute)
}

// BenchmarkNoopRuntimeVsReader compares the runtime with a no-op handler to
// kafka-go's Reader in a consumer group (FetchMessage, CommitMessages in
// batches of 1000, CommitInterval 1 s) on 12 partitions of 100-byte values.
// Both consume the same backlog of NOTIFLOW_BENCH_RECORDS (default
// 1,000,000) records, each with a fresh group, in NOTIFLOW_BENCH_ROUNDS
// (default 3) rounds whose order alternates, so that a drift in the
// machine's load does not always favour one side; the ratio of the medians
// and each round's ratio are logged (-v).
func BenchmarkNoopRuntimeVsReader(b *testing.B) {
	brokers := testkit.KafkaBrokers(b)
	topic := testkit.Topic(b, brokers, 12)
	n := benchEnv("RECORDS", 1_000_000)
	rounds := benchEnv("ROUNDS", 3)
	produceSeq(b, brokers, topic, n, 10_000, 100)

	for b.Loop() {
		var runtimeRates, readerRates []float64
		var ratios []string
		for round := range rounds {
			var rt, rd float64
			var rtCPU, rdCPU time.Duration
			for _, runtimeSide := range []bool{round%2 == 0, round%2 != 0} {
				cpu := selfCPU()
				if runtimeSide {
					rt = benchRuntime(b, brokers, topic, n, func(*Config) {}, func() {})
					rtCPU = selfCPU() - cpu
				} else {
					rd = benchReader(b, brokers, topic, n)
					rdCPU = selfCPU() - cpu
				}
			}
			b.Logf("round %d: runtime %.0f records/s, %.2f us CPU/record; reader %.0f records/s, %.2f us CPU/record (this process, group join included)",
				round+1, rt, float64(rtCPU.Nanoseconds())/1e3/float64(n), rd, float64(rdCPU.Nanoseconds())/1e3/float64(n))
			runtimeRates, readerRates = append(runtimeRates, rt), append(readerRates, rd)
			ratios = append(ratios, strconv.FormatFloat(rt/rd, 'f', 2, 64))
		}
		rt, rd := median(runtimeRates), median(readerRates)
		b.ReportMetric(rt, "runtime-records/s")
		b.ReportMetric(rd, "reader-records/s")
		b.ReportMetric(rt/rd, "runtime/reader")
		b.Logf("medians over %d rounds of %d records: runtime %.0f, reader %.0f records/s = %.2f; per round: %s",
			rounds, n, rt, rd, rt/rd, strings.Join(ratios, " "))
	}
}

// benchEnv reads NOTIFLOW_BENCH_<name>, def when unset or not a positive
// integer.
func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv("NOTIFLOW_BENCH_" + name)); err == nil && v > 0 {
		return v
	}
	return def
}

// selfCPU is this process's CPU time (user + system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func benchReader(b *testing.B, brokers []string, topic string, n int) float64 {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: brokers, GroupID: testkit.Group(b), Topic: topic,
		MinBytes: 1, MaxBytes: DefaultFetchMaxBytes, MaxWait: DefaultFetchMaxWait,
		CommitInterval: time.Second, StartOffset: kafka.FirstOffset,
	})
	defer r.Close()
	m := newRateMeter(n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	batch := make([]kafka.Message, 0, 1000)
	for i := 0; i < n; i++ {
		msg, err := r.FetchMessage(ctx)
		if err != nil {
			b.Fatalf("fetch: %v", err)
		}
		m.tick()
		batch = append(batch, msg)
		if len(batch) == cap(batch) || i == n-1 {
			if err := r.CommitMessages(ctx, batch...); err != nil {
				b.Fatalf("commit: %v", err)
			}
			batch = batch[:0]
		}
	}
	return m.wait(b, time.Second)
}

// BenchmarkKeyVsPartition: a 2 ms handler, 12 partitions, 10,000 keys, 64
// workers; key ordering against partition ordering in one run.
func BenchmarkKeyVsPartition(b *testing.B) {
	brokers := testkit.KafkaBrokers(b)
	topic := testkit.Topic(b, brokers, 12)
	const n = 60_000
	produceSeq(b, brokers, topic, n, 10_000, 100)
	rates := map[Ordering]float64{}
	for _, o := range []Ordering{OrderKey, OrderPartition} {
		b.Run(o.String(), func(b *testing.B) {
			for range b.N {
				rates[o] = benchRuntime(b, brokers, topic, n, func(c *Config) {
					c.Ordering, c.Workers = o, 64
				}, func() { time.Sleep(2 * time.Millisecond) })
			}
			b.ReportMetric(rates[o], "records/s")
		})
	}
	if rates[OrderPartition] > 0 {
		b.Logf("key/partition = %.1fx (%.0f vs %.0f records/s)", rates[OrderKey]/rates[OrderPartition], rates[OrderKey], rates[OrderPartition])
	}
}

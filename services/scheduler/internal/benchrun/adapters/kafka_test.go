package adapters_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

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

// requestCounter counts, by API key, the Kafka requests written on the
// connections it dials, and keeps the connections (to break them).
type requestCounter struct {
	mu     sync.Mutex
	counts map[protocol.ApiKey]int
	conns  []*countingConn
	dials  int
}

func newRequestCounter() *requestCounter {
	return &requestCounter{counts: map[protocol.ApiKey]int{}}
}

func (rc *requestCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cc := &countingConn{Conn: c, rc: rc}
	rc.mu.Lock()
	rc.dials++
	rc.conns = append(rc.conns, cc)
	rc.mu.Unlock()
	return cc, nil
}

// take returns the counts and the number of dials since the last take.
func (rc *requestCounter) take() (map[protocol.ApiKey]int, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	c, d := rc.counts, rc.dials
	rc.counts, rc.dials = map[protocol.ApiKey]int{}, 0
	return c, d
}

// breakAll makes every connection dialled so far answer its next read
// with io.EOF and close, as a connection the broker closed after the
// request was written.
func (rc *requestCounter) breakAll() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, c := range rc.conns {
		c.broken.Store(true)
	}
}

// countingConn parses the request frames written on it (4-byte size,
// then the 2-byte API key) and counts them.
type countingConn struct {
	net.Conn
	rc     *requestCounter
	buf    []byte
	broken atomic.Bool
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.buf = append(c.buf, p...)
	for len(c.buf) >= 6 {
		size := int(binary.BigEndian.Uint32(c.buf))
		if len(c.buf) < 4+size {
			break
		}
		c.rc.mu.Lock()
		c.rc.counts[protocol.ApiKey(binary.BigEndian.Uint16(c.buf[4:]))]++
		c.rc.mu.Unlock()
		c.buf = c.buf[4+size:]
	}
	return c.Conn.Write(p)
}

func (c *countingConn) Read(p []byte) (int, error) {
	if c.broken.Load() {
		_ = c.Conn.Close()
		return 0, io.EOF
	}
	return c.Conn.Read(p)
}

// countingRoundTripper counts, by API key, the requests a kafka.Client
// makes through it.
type countingRoundTripper struct {
	next   kafka.RoundTripper
	mu     sync.Mutex
	counts map[protocol.ApiKey]int
}

func (c *countingRoundTripper) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	c.mu.Lock()
	c.counts[req.ApiKey()]++
	c.mu.Unlock()
	return c.next.RoundTrip(ctx, addr, req)
}

func (c *countingRoundTripper) take() map[protocol.ApiKey]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.counts
	c.counts = map[protocol.ApiKey]int{}
	return out
}

// TestLagGroupsShareTopic: two groups consuming one topic are sampled
// over its partitions once each (the topic is asked for once, its
// partitions requested once): each group's lag is the topic's records.
func TestLagGroupsShareTopic(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	ctx := context.Background()
	topic := testkit.Topic(t, brokers, 3)
	w := kafkax.NewWriter(brokers, kafkax.WriterOptions{})
	defer w.Close()
	var msgs []kafka.Message
	for i := 0; i < 12; i++ {
		msgs = append(msgs, kafka.Message{Topic: topic, Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	g1, g2 := testkit.Group(t), testkit.Group(t)+"_2"
	lag := adapters.NewLag(client, adapters.GroupTopic{Group: g1, Topic: topic}, adapters.GroupTopic{Group: g2, Topic: topic})
	defer lag.Close()
	got, err := lag.Sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{g1: 12, g2: 12}; !maps.Equal(got, want) {
		t.Fatalf("lag = %v, want %v", got, want)
	}
}

// TestLagRequests: once it knows the layout and the coordinators, a sample
// of two groups whose topics have 3 and 2 partitions on one broker is one
// ListOffsets request and two OffsetFetch requests on kept connections,
// and asks the client nothing (no Metadata, no FindCoordinator); when the
// kept connection ends before the answer (the broker closed it), the
// sample succeeds on one new connection with the same lag. With one broker
// the grouping by leader and a coordinator move are not exercised.
func TestLagRequests(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	ctx := context.Background()
	due, dispatched := testkit.Topic(t, brokers, 3), testkit.Topic(t, brokers, 2)
	w := kafkax.NewWriter(brokers, kafkax.WriterOptions{})
	defer w.Close()
	var msgs []kafka.Message
	for i := 0; i < 10; i++ {
		msgs = append(msgs, kafka.Message{Topic: due, Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")},
			kafka.Message{Topic: dispatched, Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	viaLag := newRequestCounter()
	// The client's requests are counted as it makes them (its transport
	// answers Metadata from a cache, without a request on the wire). A
	// background metadata refresh within the test is very unlikely: it
	// comes at a random time within the hour.
	tr := &kafka.Transport{MetadataTTL: time.Hour}
	defer tr.CloseIdleConnections()
	viaClient := &countingRoundTripper{next: tr, counts: map[protocol.ApiKey]int{}}
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second, Transport: viaClient}
	g1, g2 := testkit.Group(t), testkit.Group(t)+"_2"
	lag := adapters.NewLag(client, adapters.GroupTopic{Group: g1, Topic: due}, adapters.GroupTopic{Group: g2, Topic: dispatched})
	defer lag.Close()
	adapters.SetDial(lag, viaLag.dial)

	want := map[string]int64{g1: 10, g2: 10}
	sample := func(what string) {
		t.Helper()
		got, err := lag.Sample(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("%s: lag = %v, want %v", what, got, want)
		}
	}
	sample("first sample")
	if counts := viaClient.take(); counts[protocol.Metadata] != 1 || counts[protocol.FindCoordinator] != 2 {
		t.Fatalf("first sample asked the client %v, want 1 Metadata and 2 FindCoordinator", counts)
	}
	viaLag.take()
	for i := 0; i < 3; i++ {
		sample("kept connections")
	}
	if counts, dials := viaLag.take(); !maps.Equal(counts, map[protocol.ApiKey]int{protocol.ListOffsets: 3, protocol.OffsetFetch: 6}) || dials != 0 {
		t.Fatalf("3 samples sent %v on %d new connections, want 3 ListOffsets and 6 OffsetFetch on none", counts, dials)
	}
	if counts := viaClient.take(); len(counts) != 0 {
		t.Fatalf("3 samples asked the client %v, want nothing", counts)
	}

	viaLag.breakAll()
	sample("after the broker closed the connection")
	// The ListOffsets written on the broken connection, then on the new one
	// its ApiVersions, the ListOffsets again and the two OffsetFetch.
	wantCounts := map[protocol.ApiKey]int{protocol.ApiVersions: 1, protocol.ListOffsets: 2, protocol.OffsetFetch: 2}
	if counts, dials := viaLag.take(); !maps.Equal(counts, wantCounts) || dials != 1 {
		t.Fatalf("after the break: %v on %d new connections, want %v on 1", counts, dials, wantCounts)
	}
}

// BenchmarkLagSample measures what one lag sample of two groups over
// 12-partition topics costs the broker (and this process), samples taken
// back to back, for the adapter and for the same sample through kafka-go's
// Client (the baseline: a ListOffsets request per partition, a
// FindCoordinator before each OffsetFetch). The broker's CPU includes its
// own idle work over the time. Paced as the
// watcher samples (every 250 ms), a sample's cost is below the broker's
// idle work's variation over the same time, so the samples run back to
// back. The broker must run on this machine from `make deps` (its pid in
// .deps/kafka/kafka.pid).
//
//	go test -run '^$' -bench LagSample -benchtime 2000x -count 3 ./internal/benchrun/adapters/
func BenchmarkLagSample(b *testing.B) {
	brokers := testkit.KafkaBrokers(b)
	pid := kafkaPid(b)
	ctx := context.Background()
	due, dispatched := testkit.Topic(b, brokers, 12), testkit.Topic(b, brokers, 12)
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	groups := []adapters.GroupTopic{{Group: testkit.Group(b), Topic: due}, {Group: testkit.Group(b) + "_2", Topic: dispatched}}
	lag := adapters.NewLag(client, groups...)
	defer lag.Close()
	all := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	samplers := map[string]func() error{
		"adapter": func() error { _, err := lag.Sample(ctx); return err },
		"kafka-go-client": func() error {
			req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
			for _, g := range groups {
				for _, p := range all {
					req.Topics[g.Topic] = append(req.Topics[g.Topic], kafka.LastOffsetOf(p))
				}
			}
			if _, err := client.ListOffsets(ctx, req); err != nil {
				return err
			}
			for _, g := range groups {
				res, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: g.Group, Topics: map[string][]int{g.Topic: all}})
				if err == nil {
					err = res.Error
				}
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
	for _, name := range []string{"kafka-go-client", "adapter"} {
		b.Run(name, func(b *testing.B) {
			if err := samplers[name](); err != nil { // connections, metadata, coordinators
				b.Fatal(err)
			}
			k0, c0 := testkit.ProcessCPUSeconds(pid), testkit.ProcessCPUSeconds(os.Getpid())
			b.ResetTimer()
			for range b.N {
				if err := samplers[name](); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			k1, c1 := testkit.ProcessCPUSeconds(pid), testkit.ProcessCPUSeconds(os.Getpid())
			b.ReportMetric((k1-k0)*1e6/float64(b.N), "broker_cpu_us/sample")
			b.ReportMetric((c1-c0)*1e6/float64(b.N), "client_cpu_us/sample")
		})
	}
}

// kafkaPid returns the pid of the broker `make deps` runs, from its pid
// file in the repository.
func kafkaPid(tb testing.TB) int {
	tb.Helper()
	root, err := testkit.RepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	pid, ok := testkit.DepPids(root)["kafka"]
	if !ok || testkit.ProcessCPUSeconds(pid) < 0 {
		tb.Fatalf("no broker process from the pid file under %s/.deps (start it with make deps)", root)
	}
	return pid
}

package adapters

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/apiversions"
	"github.com/segmentio/kafka-go/protocol/listoffsets"
	"github.com/segmentio/kafka-go/protocol/offsetfetch"
)

// GroupTopic is a consumer group and the topic it consumes.
type GroupTopic struct {
	Group string
	Topic string
}

// Lag samples the lag of consumer groups: per group, the sum over its
// topic's partitions of high watermark minus committed offset (a partition
// without a committed offset counts from 0).
//
// A sample is one ListOffsets request per partition leader, for all the
// partitions it leads, and one OffsetFetch request per group, to the
// group's coordinator (bench/README.md says what that saves against
// kafka-go's Client, which splits ListOffsets by partition and finds the
// coordinator before every OffsetFetch). The requests are encoded by
// kafka-go's protocol package and sent on connections Lag keeps, one per
// broker, the versions negotiated once per connection. The leaders
// (Metadata) and the coordinators (FindCoordinator) come from the client
// and are kept until a sample fails; the client answers Metadata from its
// transport's cache, so after a leader change samples may fail until that
// cache is refreshed (MetadataTTL). A request that fails on a kept
// connection is sent once more on a new one (the broker may have closed it
// while idle): the requests only read.
//
// Safe for concurrent use; samples are taken one at a time.
type Lag struct {
	client *kafka.Client
	groups []GroupTopic
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)

	mu     sync.Mutex
	layout *lagLayout             // nil: ask the cluster
	coord  map[string]string      // group -> coordinator address
	conns  map[string]*brokerConn // address -> connection
}

// lagLayout is where the groups' topics' partitions are.
type lagLayout struct {
	partitions map[string][]int            // topic -> partition ids, in order
	leaders    map[string]map[string][]int // leader address -> topic -> partition ids
}

// lagTimeout bounds a sample when the client has no Timeout.
const lagTimeout = 10 * time.Second

// NewLag samples groups, asking client for the cluster's metadata and the
// groups' coordinators. A whole sample, connecting included, is bounded by
// client.Timeout (lagTimeout when it is 0).
func NewLag(client *kafka.Client, groups ...GroupTopic) *Lag {
	var d net.Dialer
	return &Lag{client: client, groups: groups, dial: d.DialContext, coord: map[string]string{}, conns: map[string]*brokerConn{}}
}

// Groups returns the sampled group ids.
func (l *Lag) Groups() []string {
	out := make([]string, len(l.groups))
	for i, g := range l.groups {
		out[i] = g.Group
	}
	return out
}

// Close closes the connections Lag keeps, after a sample in progress; a
// later Sample opens new ones.
func (l *Lag) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for addr, c := range l.conns {
		_ = c.conn.Close()
		delete(l.conns, addr)
	}
}

// Sample returns the current lag of every group (see Lag), within the
// client's Timeout. When ctx ends or the time is up, the request under way
// is abandoned and its connection closed. After any error it forgets the
// partitions' leaders and the coordinators, so the next sample asks again.
func (l *Lag) Sample(ctx context.Context) (map[string]int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	timeout := l.client.Timeout
	if timeout <= 0 {
		timeout = lagTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := l.sample(ctx)
	if err != nil {
		l.layout = nil
		clear(l.coord)
		return nil, fmt.Errorf("sample consumer lag: %w", err)
	}
	return out, nil
}

func (l *Lag) sample(ctx context.Context) (map[string]int64, error) {
	lay, err := l.topicLayout(ctx)
	if err != nil {
		return nil, err
	}
	hwm := map[string]map[int]int64{}
	for addr, topics := range lay.leaders {
		req := &listoffsets.Request{ReplicaID: -1}
		for topic, ps := range topics {
			rt := listoffsets.RequestTopic{Topic: topic}
			for _, p := range ps {
				// Timestamp -1: the latest offset, the high watermark.
				rt.Partitions = append(rt.Partitions, listoffsets.RequestPartition{Partition: int32(p), CurrentLeaderEpoch: -1, Timestamp: -1})
			}
			req.Topics = append(req.Topics, rt)
		}
		m, err := l.roundTrip(ctx, addr, req)
		if err != nil {
			return nil, fmt.Errorf("list offsets at %s: %w", addr, err)
		}
		for _, t := range m.(*listoffsets.Response).Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					return nil, fmt.Errorf("offsets of %s/%d: %w", t.Topic, p.Partition, kafka.Error(p.ErrorCode))
				}
				if hwm[t.Topic] == nil {
					hwm[t.Topic] = map[int]int64{}
				}
				hwm[t.Topic][int(p.Partition)] = p.Offset
			}
		}
	}
	out := make(map[string]int64, len(l.groups))
	for _, g := range l.groups {
		committed, err := l.committed(ctx, g, lay.partitions[g.Topic])
		if err != nil {
			return nil, fmt.Errorf("committed offsets of group %s: %w", g.Group, err)
		}
		var lag int64
		for _, p := range lay.partitions[g.Topic] {
			h, ok := hwm[g.Topic][p]
			if !ok {
				return nil, fmt.Errorf("no high watermark of %s/%d in the brokers' answers", g.Topic, p)
			}
			c, ok := committed[p]
			if !ok {
				return nil, fmt.Errorf("no committed offset of group %s on %s/%d in the coordinator's answer", g.Group, g.Topic, p)
			}
			lag += max(0, h-max(c, 0))
		}
		out[g.Group] = lag
	}
	return out, nil
}

// committed returns group g's committed offsets on partitions of its
// topic (-1: none), from its coordinator.
func (l *Lag) committed(ctx context.Context, g GroupTopic, partitions []int) (map[int]int64, error) {
	addr, ok := l.coord[g.Group]
	if !ok {
		res, err := l.client.FindCoordinator(ctx, &kafka.FindCoordinatorRequest{Key: g.Group, KeyType: kafka.CoordinatorKeyTypeConsumer})
		if err == nil {
			err = res.Error
		}
		if err != nil {
			return nil, fmt.Errorf("find the coordinator: %w", err)
		}
		addr = net.JoinHostPort(res.Coordinator.Host, strconv.Itoa(res.Coordinator.Port))
		l.coord[g.Group] = addr
	}
	ids := make([]int32, len(partitions))
	for i, p := range partitions {
		ids[i] = int32(p)
	}
	m, err := l.roundTrip(ctx, addr, &offsetfetch.Request{GroupID: g.Group, Topics: []offsetfetch.RequestTopic{{Name: g.Topic, PartitionIndexes: ids}}})
	if err != nil {
		return nil, fmt.Errorf("offset fetch at %s: %w", addr, err)
	}
	res := m.(*offsetfetch.Response)
	if res.ErrorCode != 0 {
		return nil, kafka.Error(res.ErrorCode)
	}
	out := map[int]int64{}
	for _, t := range res.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return nil, fmt.Errorf("on %s/%d: %w", t.Name, p.PartitionIndex, kafka.Error(p.ErrorCode))
			}
			if t.Name == g.Topic {
				out[int(p.PartitionIndex)] = p.CommittedOffset
			}
		}
	}
	return out, nil
}

// topicLayout returns the partitions of the groups' topics and their
// leaders, asking the cluster when they are not known.
func (l *Lag) topicLayout(ctx context.Context) (*lagLayout, error) {
	if l.layout != nil {
		return l.layout, nil
	}
	var topics []string
	for _, g := range l.groups {
		// Groups may share a topic: it is asked for, and sampled, once.
		if !slices.Contains(topics, g.Topic) {
			topics = append(topics, g.Topic)
		}
	}
	md, err := l.client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("topic metadata: %w", err)
	}
	lay := &lagLayout{partitions: map[string][]int{}, leaders: map[string]map[string][]int{}}
	for _, t := range md.Topics {
		if t.Error != nil {
			return nil, fmt.Errorf("topic %s: %w", t.Name, t.Error)
		}
		for _, p := range t.Partitions {
			if p.Error != nil {
				return nil, fmt.Errorf("partition %s/%d: %w", t.Name, p.ID, p.Error)
			}
			if p.Leader.Host == "" {
				return nil, fmt.Errorf("partition %s/%d has no leader", t.Name, p.ID)
			}
			addr := net.JoinHostPort(p.Leader.Host, strconv.Itoa(p.Leader.Port))
			if lay.leaders[addr] == nil {
				lay.leaders[addr] = map[string][]int{}
			}
			lay.partitions[t.Name] = append(lay.partitions[t.Name], p.ID)
			lay.leaders[addr][t.Name] = append(lay.leaders[addr][t.Name], p.ID)
		}
	}
	for _, tp := range topics {
		if len(lay.partitions[tp]) == 0 {
			return nil, fmt.Errorf("topic %s has no partitions", tp)
		}
	}
	l.layout = lay
	return lay, nil
}

// brokerConn is a connection Lag keeps to one broker.
type brokerConn struct {
	conn     net.Conn
	r        *bufio.Reader // answers are decoded in small reads
	corr     int32
	versions map[protocol.ApiKey]int16 // the versions both sides speak
}

// roundTrip sends req to the broker at addr and returns its answer, on the
// kept connection or, when that fails or there is none, on a new one.
func (l *Lag) roundTrip(ctx context.Context, addr string, req protocol.Message) (protocol.Message, error) {
	if c, ok := l.conns[addr]; ok {
		m, err := c.roundTrip(ctx, req)
		if err == nil {
			return m, nil
		}
		_ = c.conn.Close()
		delete(l.conns, addr)
		if ctx.Err() != nil {
			return nil, err
		}
	}
	c, err := l.connect(ctx, addr)
	if err != nil {
		return nil, err
	}
	m, err := c.roundTrip(ctx, req)
	if err != nil {
		_ = c.conn.Close()
		return nil, err
	}
	l.conns[addr] = c
	return m, nil
}

// connect opens a connection to addr and negotiates the versions of the
// requests Lag sends (ApiVersions).
func (l *Lag) connect(ctx context.Context, addr string) (*brokerConn, error) {
	conn, err := l.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	c := &brokerConn{conn: conn, r: bufio.NewReader(conn), versions: map[protocol.ApiKey]int16{protocol.ApiVersions: 0}}
	m, err := c.roundTrip(ctx, &apiversions.Request{})
	if err == nil && m.(*apiversions.Response).ErrorCode != 0 {
		err = kafka.Error(m.(*apiversions.Response).ErrorCode)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("api versions: %w", err)
	}
	for _, k := range m.(*apiversions.Response).ApiKeys {
		key := protocol.ApiKey(k.ApiKey)
		if key != protocol.ListOffsets && key != protocol.OffsetFetch {
			continue
		}
		v := min(k.MaxVersion, key.MaxVersion())
		if v < k.MinVersion || v < key.MinVersion() {
			_ = conn.Close()
			return nil, fmt.Errorf("the broker speaks %s v%d-v%d, kafka-go v%d-v%d", key, k.MinVersion, k.MaxVersion, key.MinVersion(), key.MaxVersion())
		}
		c.versions[key] = v
	}
	for _, key := range []protocol.ApiKey{protocol.ListOffsets, protocol.OffsetFetch} {
		if _, ok := c.versions[key]; !ok {
			_ = conn.Close()
			return nil, fmt.Errorf("the broker does not support %s", key)
		}
	}
	return c, nil
}

// roundTrip sends req and reads its answer, by ctx's deadline (Sample
// always sets one); when ctx ends first it fails at once.
func (c *brokerConn) roundTrip(ctx context.Context, req protocol.Message) (protocol.Message, error) {
	deadline, _ := ctx.Deadline()
	if err := c.conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c.corr++
	m, err := protocol.RoundTrip(struct {
		io.Reader
		io.Writer
	}{c.r, c.conn}, c.versions[req.ApiKey()], c.corr, "notiflow-bench-lag", req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, errors.Join(ctx.Err(), err)
		}
		return nil, err
	}
	return m, nil
}

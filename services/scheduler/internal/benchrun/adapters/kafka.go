package adapters

import (
	"context"
	"fmt"
	"sync"

	"github.com/segmentio/kafka-go"
)

// GroupTopic is a consumer group and the topic it consumes.
type GroupTopic struct {
	Group string
	Topic string
}

// Lag samples the lag of consumer groups: per group, the sum over its
// topic's partitions of high watermark minus committed offset (a partition
// without a committed offset counts from 0). Safe for concurrent use.
type Lag struct {
	client *kafka.Client
	groups []GroupTopic

	mu         sync.Mutex
	partitions map[string][]int // topic -> partition ids, cached; never mutated once set
}

// NewLag samples groups through client.
func NewLag(client *kafka.Client, groups ...GroupTopic) *Lag {
	return &Lag{client: client, groups: groups}
}

// Groups returns the sampled group ids.
func (l *Lag) Groups() []string {
	out := make([]string, len(l.groups))
	for i, g := range l.groups {
		out[i] = g.Group
	}
	return out
}

// Sample returns the current lag of every group: one ListOffsets call for
// the high watermarks (kafka-go sends it as one request per partition) and
// one OffsetFetch per group (each after a FindCoordinator).
func (l *Lag) Sample(ctx context.Context) (map[string]int64, error) {
	parts, err := l.topicPartitions(ctx)
	if err != nil {
		return nil, err
	}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for topic, ps := range parts {
		for _, p := range ps {
			req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p))
		}
	}
	offs, err := l.client.ListOffsets(ctx, req)
	if err != nil {
		l.forget()
		return nil, fmt.Errorf("sample consumer lag: list offsets: %w", err)
	}
	hwm := map[string]map[int]int64{}
	for topic, ps := range offs.Topics {
		hwm[topic] = map[int]int64{}
		for _, p := range ps {
			if p.Error != nil {
				l.forget()
				return nil, fmt.Errorf("sample consumer lag: offsets of %s/%d: %w", topic, p.Partition, p.Error)
			}
			hwm[topic][p.Partition] = p.LastOffset
		}
	}
	out := make(map[string]int64, len(l.groups))
	for _, g := range l.groups {
		res, err := l.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: g.Group, Topics: map[string][]int{g.Topic: parts[g.Topic]}})
		if err == nil {
			err = res.Error
		}
		if err != nil {
			return nil, fmt.Errorf("sample consumer lag: committed offsets of group %s: %w", g.Group, err)
		}
		committed := map[int]int64{}
		for _, p := range res.Topics[g.Topic] {
			if p.Error != nil {
				return nil, fmt.Errorf("sample consumer lag: committed offset of group %s on %s/%d: %w", g.Group, g.Topic, p.Partition, p.Error)
			}
			committed[p.Partition] = p.CommittedOffset
		}
		var lag int64
		for _, p := range parts[g.Topic] {
			lag += max(0, hwm[g.Topic][p]-max(committed[p], 0))
		}
		out[g.Group] = lag
	}
	return out, nil
}

func (l *Lag) forget() {
	l.mu.Lock()
	l.partitions = nil // a fresh map next time; callers may still read the old one
	l.mu.Unlock()
}

// topicPartitions returns the partitions of the groups' topics, asking the
// cluster once and again after an error.
func (l *Lag) topicPartitions(ctx context.Context) (map[string][]int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.partitions) > 0 {
		return l.partitions, nil
	}
	var topics []string
	for _, g := range l.groups {
		topics = append(topics, g.Topic)
	}
	md, err := l.client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("sample consumer lag: topic metadata: %w", err)
	}
	parts := map[string][]int{}
	for _, t := range md.Topics {
		if t.Error != nil {
			return nil, fmt.Errorf("sample consumer lag: topic %s: %w", t.Name, t.Error)
		}
		for _, p := range t.Partitions {
			parts[t.Name] = append(parts[t.Name], p.ID)
		}
	}
	for _, tp := range topics {
		if len(parts[tp]) == 0 {
			return nil, fmt.Errorf("sample consumer lag: topic %s has no partitions", tp)
		}
	}
	l.partitions = parts
	return parts, nil
}

package consume

import (
	"fmt"
	"strconv"
)

// flushCounts moves the hot-path counts into the Prometheus metrics: the
// consumed and processed counters and this generation's share of the
// in-flight gauge (records it fetched and has not finished). Called by the
// committer only, every commit interval and at generation end, so the
// metrics lag by at most one interval.
func (g *generation[T]) flushCounts() {
	var inFlight int64
	for _, p := range g.parts {
		c, d := p.nConsumed.Load(), p.nProcessed.Load()
		p.consumed.Add(float64(c - p.reportedConsumed))
		p.processed.Add(float64(d - p.reportedProcessed))
		p.reportedConsumed, p.reportedProcessed = c, d
		inFlight += p.inFlight.n.Load()
	}
	g.inFlight.Add(float64(inFlight - g.reportedInFlight))
	g.reportedInFlight = inFlight
}

// commit commits, within this generation, the position of every partition
// that moved since the last commit.
func (g *generation[T]) commit() error {
	group := g.c.cfg.GroupID
	offsets := map[string]map[int]int64{}
	var moved []*partition
	for _, p := range g.parts {
		off, ok := p.tr.position()
		if hwm := p.hwm.Load(); hwm > 0 && ok {
			g.c.m.lag.WithLabelValues(group, p.topic, strconv.Itoa(p.id)).Set(float64(max(hwm-off, 0)))
		}
		g.c.m.uncommitted.WithLabelValues(group, p.topic, strconv.Itoa(p.id)).Set(float64(p.tr.size()))
		if !ok || off <= p.committed {
			continue
		}
		if offsets[p.topic] == nil {
			offsets[p.topic] = map[int]int64{}
		}
		offsets[p.topic][p.id] = off
		moved = append(moved, p)
	}
	if len(moved) == 0 {
		return nil
	}
	if err := g.gen.CommitOffsets(offsets); err != nil {
		return fmt.Errorf("commit %d partition(s) in generation %d: %w", len(moved), g.gen.ID, err)
	}
	for _, p := range moved {
		p.committed = offsets[p.topic][p.id]
		g.c.m.committedOffset.WithLabelValues(group, p.topic, strconv.Itoa(p.id)).Set(float64(p.committed))
	}
	return nil
}

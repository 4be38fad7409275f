package consume

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
)

// drainSeen records when waiting handlers saw their generation's drain
// begin.
type drainSeen struct {
	mu  sync.Mutex
	saw []handleBegin
}

func (d *drainSeen) add(member, key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.saw = append(d.saw, handleBegin{member: member, key: key, at: time.Now()})
}

// since returns the sightings at or after t.
func (d *drainSeen) since(t time.Time) []handleBegin {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []handleBegin
	for _, s := range d.saw {
		if !s.at.Before(t) {
			out = append(out, s)
		}
	}
	return out
}

// waiter returns member's handler: it logs each call to h; a record whose
// key ends in "-wait" waits, holding nothing, until its generation drains
// (noted in seen), then gives way with ErrDraining; a cancelled context
// ends the wait too.
func (h *handleLog) waiter(member string, seen *drainSeen) HandlerFunc[seqRec] {
	return func(ctx context.Context, r *Record[seqRec]) error {
		h.begin(member, r.Value.key)
		defer h.end(member, r.Value.key)
		if !strings.HasSuffix(r.Value.key, "-wait") {
			return nil
		}
		select {
		case <-Draining(ctx):
			seen.add(member, r.Value.key)
			return fmt.Errorf("wait for %s: %w", r.Value.key, ErrDraining)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// begunBy returns how many calls of key member began.
func (h *handleLog) begunBy(member, key string) int {
	begins, _ := h.snapshot()
	n := 0
	for _, b := range begins {
		if b.key == key && (member == "" || b.member == member) {
			n++
		}
	}
	return n
}

// TestDrainingSignalsWaitingHandlers: every partition holds one record
// whose handler waits until its generation drains. When a third member
// joins (a rebalance) and when the members shut down, the waiting handlers
// see Draining close within a heartbeat or two, give way, and the drains
// end long before DrainTimeout (20s). The records given up are neither
// committed nor dead lettered: the next owners run them again, and a last
// member that completes them commits them.
func TestDrainingSignalsWaitingHandlers(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	const parts = 4
	const prompt = 3 * time.Second
	topic := testkit.Topic(t, brokers, parts)
	producePerPartition(t, brokers, topic, parts, "wait")
	hl := &handleLog{running: map[string]string{}}
	seen := &drainSeen{}
	cfg := drainConfig(t, brokers, topic)
	cfg.RebalanceTimeout = 30 * time.Second
	cfg.DrainTimeout = 20 * time.Second
	dlq := cfg.DLQ.(*memDLQ)
	start := func(member string) (*genLog, func()) {
		t.Helper()
		gl := &genLog{}
		cfg := cfg
		cfg.Logger = slog.New(gl)
		c, err := New(cfg, decodeSeq, hl.waiter(member, seen))
		if err != nil {
			t.Fatal(err)
		}
		return gl, runConsumer(t, c)
	}
	notCommitted := func(when string) {
		t.Helper()
		for p, off := range committed(t, brokers, cfg.GroupID, topic, parts) {
			if off > 0 {
				t.Errorf("partition %d: committed offset %d %s, want the waiting record uncommitted", p, off, when)
			}
		}
		dlq.mu.Lock()
		defer dlq.mu.Unlock()
		if len(dlq.recs) > 0 {
			t.Errorf("%d dead letters %s (first: %v), want none", len(dlq.recs), when, dlq.recs[0].Reason)
		}
	}

	glA, stopA := start("A")
	glB, stopB := start("B")
	testkit.Eventually(t, 60*time.Second, func() error { return hl.blocked(parts, "A", "B") })

	// A rebalance: the waiting handlers see the drain begin and give way.
	joined := time.Now()
	_, stopC := start("C")
	testkit.Eventually(t, 10*time.Second, func() error {
		if n := len(seen.since(joined)); n < parts {
			return fmt.Errorf("%d of %d waiting handlers saw the drain begin %s after the rebalance began",
				n, parts, time.Since(joined).Round(time.Millisecond))
		}
		return nil
	})
	for _, s := range seen.since(joined) {
		if d := s.at.Sub(joined); d > prompt {
			t.Errorf("member %s saw the drain of %s %s after the rebalance began, want within %s", s.member, s.key, d.Round(time.Millisecond), prompt)
		}
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		for name, gl := range map[string]*genLog{"A": glA, "B": glB} {
			if _, ok := gl.endAfter(joined); !ok {
				return fmt.Errorf("member %s's generation not ended %s after the rebalance began", name, time.Since(joined).Round(time.Millisecond))
			}
		}
		return nil
	})
	notCommitted("after the rebalance")

	// The next owners run every waiting record again.
	testkit.Eventually(t, 60*time.Second, func() error {
		for p := range parts {
			if key := fmt.Sprintf("p%d-wait", p); hl.begunBy("", key) < 2 {
				return fmt.Errorf("%s not run again after the rebalance", key)
			}
		}
		return hl.blocked(parts)
	})

	// A shutdown: every member returns promptly.
	stopping := time.Now()
	var wg sync.WaitGroup
	for _, stop := range []func(){stopA, stopB, stopC} {
		wg.Go(stop)
	}
	wg.Wait()
	if d := time.Since(stopping); d > prompt {
		t.Errorf("shutdown took %s with records waiting on the drain, want within %s (drain timeout %s)", d.Round(time.Millisecond), prompt, cfg.DrainTimeout)
	}
	if n := len(seen.since(stopping)); n != parts {
		t.Errorf("%d of %d waiting handlers saw the shutdown's drain begin", n, parts)
	}
	notCommitted("after the shutdown")

	// The next owner gets them again; completed, they are committed.
	cfg.Logger = slog.New(&genLog{})
	cfg.CommitInterval = 100 * time.Millisecond
	c, err := New(cfg, decodeSeq, hl.handler("D"))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, c)
	testkit.Eventually(t, 60*time.Second, func() error {
		for p, off := range committed(t, brokers, cfg.GroupID, topic, parts) {
			if off != 1 {
				return fmt.Errorf("partition %d: committed offset %d, want 1", p, off)
			}
		}
		return nil
	})
	for p := range parts {
		if key := fmt.Sprintf("p%d-wait", p); hl.begunBy("D", key) != 1 {
			t.Errorf("member D ran %s %d times, want once", key, hl.begunBy("D", key))
		}
	}
	dlq.mu.Lock()
	defer dlq.mu.Unlock()
	if len(dlq.recs) > 0 {
		t.Errorf("%d dead letters, want none", len(dlq.recs))
	}
}

package consume

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
)

// handleLog records the handler calls of several members: when each began,
// and every call that began while another call of its key was running.
type handleLog struct {
	mu      sync.Mutex
	running map[string]string // key -> member running it
	begins  []handleBegin
	overlap []string
}

type handleBegin struct {
	member string
	key    string
	at     time.Time
}

func (h *handleLog) begin(member, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if other, ok := h.running[key]; ok {
		h.overlap = append(h.overlap, fmt.Sprintf("member %s began key %s while member %s was still running it", member, key, other))
	}
	h.running[key] = member
	h.begins = append(h.begins, handleBegin{member: member, key: key, at: time.Now()})
}

func (h *handleLog) end(member, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running[key] == member {
		delete(h.running, key)
	}
}

func (h *handleLog) snapshot() ([]handleBegin, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]handleBegin(nil), h.begins...), append([]string(nil), h.overlap...)
}

// genLog is a slog.Handler that keeps the times a consumer logged the end
// of a generation.
type genLog struct {
	mu    sync.Mutex
	ended []time.Time
}

func (g *genLog) Enabled(context.Context, slog.Level) bool { return true }
func (g *genLog) WithAttrs([]slog.Attr) slog.Handler       { return g }
func (g *genLog) WithGroup(string) slog.Handler            { return g }
func (g *genLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "generation ended" {
		g.mu.Lock()
		g.ended = append(g.ended, r.Time)
		g.mu.Unlock()
	}
	return nil
}

// firstEnd returns when the first generation ended.
func (g *genLog) firstEnd() (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.ended) == 0 {
		return time.Time{}, false
	}
	return g.ended[0], true
}

// TestDrainLongerThanSessionKeepsPartitions: two members each hold a record
// whose handler runs until it is cancelled; a third member joins. The drain
// (9s) is longer than the session timeout (6s). The old generations must
// keep their partitions until they return (no record of theirs runs on the
// new generation before that, no key runs twice at once), and their final
// commits must be accepted.
func TestDrainLongerThanSessionKeepsPartitions(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	const parts = 4
	topic := testkit.Topic(t, brokers, parts)

	// Every partition p holds "p<p>-fast" at offset 0 (done at once) and
	// "p<p>-block" at offset 1 (runs until its context is cancelled).
	w := kafkax.NewWriter(brokers, kafkax.WriterOptions{})
	w.Balancer = kafka.BalancerFunc(func(m kafka.Message, _ ...int) int {
		p, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(string(m.Key), "-", 2)[0], "p"))
		return p
	})
	for _, kind := range []string{"fast", "block"} {
		var msgs []kafka.Message
		for p := range parts {
			k := "p" + strconv.Itoa(p) + "-" + kind
			msgs = append(msgs, kafka.Message{Topic: topic, Key: []byte(k), Value: []byte(k + "|0|")})
		}
		if err := w.WriteMessages(context.Background(), msgs...); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	_ = w.Close()

	hl := &handleLog{running: map[string]string{}}
	handler := func(member string) HandlerFunc[seqRec] {
		return func(ctx context.Context, r *Record[seqRec]) error {
			hl.begin(member, r.Value.key)
			defer hl.end(member, r.Value.key)
			if strings.HasSuffix(r.Value.key, "-block") {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}
	}
	cfg := baseConfig(t, brokers, topic)
	cfg.SessionTimeout = 6 * time.Second // the broker's minimum
	cfg.HeartbeatInterval = 500 * time.Millisecond
	cfg.RebalanceTimeout = 20 * time.Second
	cfg.DrainTimeout = 9 * time.Second
	// No periodic commits: every commit in this test is a generation's
	// final commit.
	cfg.CommitInterval = time.Hour

	start := func(member string) (*genLog, func()) {
		gl := &genLog{}
		mc := cfg
		mc.Logger = slog.New(gl)
		c, err := New(mc, decodeSeq, handler(member))
		if err != nil {
			t.Fatal(err)
		}
		return gl, runConsumer(t, c)
	}
	glA, stopA := start("A")
	glB, stopB := start("B")
	// Wait until every block record runs on A or B.
	testkit.Eventually(t, 60*time.Second, func() error {
		hl.mu.Lock()
		defer hl.mu.Unlock()
		if n := len(hl.running); n != parts {
			return fmt.Errorf("%d block records running, want %d", n, parts)
		}
		return nil
	})
	joined := time.Now()
	_, stopC := start("C")
	defer func() { // the three drains run in parallel, not one after the other
		var wg sync.WaitGroup
		for _, stop := range []func(){stopA, stopB, stopC} {
			wg.Go(stop)
		}
		wg.Wait()
	}()

	var oldEnd time.Time
	testkit.Eventually(t, 60*time.Second, func() error {
		a, okA := glA.firstEnd()
		b, okB := glB.firstEnd()
		if !okA || !okB {
			return fmt.Errorf("old generations not ended yet (A %v, B %v)", okA, okB)
		}
		oldEnd = a
		if b.After(a) {
			oldEnd = b
		}
		return nil
	})
	// The old generations made their final commits before returning: fast
	// records done, block records abandoned.
	got := committed(t, brokers, cfg.GroupID, topic, parts)
	for p := range parts {
		if got[p] != 1 {
			t.Errorf("partition %d: committed offset %d after the old generations ended, want 1 (their final commit)", p, got[p])
		}
	}
	// The new generation takes over the block records, but only after the
	// old generations returned.
	testkit.Eventually(t, 60*time.Second, func() error {
		begins, _ := hl.snapshot()
		for _, b := range begins {
			if b.member == "C" {
				return nil
			}
		}
		return fmt.Errorf("the joining member handled nothing yet")
	})
	begins, overlap := hl.snapshot()
	for _, b := range begins {
		if b.at.After(joined) && b.at.Before(oldEnd) {
			t.Errorf("member %s began %s %s after the rebalance began, %s before the old generations returned",
				b.member, b.key, b.at.Sub(joined).Round(time.Millisecond), oldEnd.Sub(b.at).Round(time.Millisecond))
		}
	}
	for _, o := range overlap {
		t.Error(o)
	}
}

func TestValidateDrainAgainstGroupTimeouts(t *testing.T) {
	t.Parallel()
	valid := func() Config {
		c := Config{Brokers: []string{"b"}, GroupID: "g", Topics: []string{"t"}, DLQ: &memDLQ{}}
		c.setDefaults()
		return c
	}
	tests := []struct {
		name string
		give func(c *Config)
		want string // "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"drain longer than the session", func(c *Config) { c.DrainTimeout = 20 * time.Second }, ""},
		{"longest drain", func(c *Config) { c.DrainTimeout = 26 * time.Second }, ""},
		{"drain past the rebalance timeout less margin", func(c *Config) { c.DrainTimeout = 27 * time.Second }, "DrainTimeout"},
		{"drain margin eaten by the heartbeat", func(c *Config) {
			c.DrainTimeout, c.HeartbeatInterval, c.SessionTimeout = 20*time.Second, 8*time.Second, 30*time.Second
		}, "DrainTimeout"},
		{"heartbeat too slow for the session", func(c *Config) { c.HeartbeatInterval = 3 * time.Second }, "SessionTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.give(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate: %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate: %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

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
// of a generation, and its member id.
type genLog struct {
	mu       sync.Mutex
	ended    []time.Time
	joined   []time.Time
	member   string
	warnings []string // warnings and errors, with their attributes
}

func (g *genLog) Enabled(context.Context, slog.Level) bool { return true }
func (g *genLog) WithAttrs([]slog.Attr) slog.Handler       { return g }
func (g *genLog) WithGroup(string) slog.Handler            { return g }
func (g *genLog) Handle(_ context.Context, r slog.Record) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.Level >= slog.LevelWarn {
		line := r.Message
		r.Attrs(func(a slog.Attr) bool {
			line += " " + a.String()
			return true
		})
		g.warnings = append(g.warnings, line)
	}
	switch r.Message {
	case "generation ended":
		g.ended = append(g.ended, r.Time)
	case "joined generation":
		g.joined = append(g.joined, r.Time)
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "member" {
				g.member = a.Value.String()
			}
			return true
		})
	}
	return nil
}

// warningLines returns the warnings and errors logged so far.
func (g *genLog) warningLines() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.warnings...)
}

// memberID returns the member id of the last generation joined.
func (g *genLog) memberID() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.member
}

// firstEnd returns when the first generation ended.
func (g *genLog) firstEnd() (time.Time, bool) { return g.first(&g.ended) }

// endAfter returns when the first generation that ended at or after t
// ended.
func (g *genLog) endAfter(t time.Time) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range g.ended {
		if !e.Before(t) {
			return e, true
		}
	}
	return time.Time{}, false
}

// firstJoin returns when the first generation was joined.
func (g *genLog) firstJoin() (time.Time, bool) { return g.first(&g.joined) }

func (g *genLog) first(times *[]time.Time) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(*times) == 0 {
		return time.Time{}, false
	}
	return (*times)[0], true
}

// producePerPartition writes, for each kind in turn, one record to every
// partition p with key and value "p<p>-<kind>".
func producePerPartition(tb testing.TB, brokers []string, topic string, parts int, kinds ...string) {
	tb.Helper()
	w := kafkax.NewWriter(brokers, kafkax.WriterOptions{})
	defer w.Close()
	w.Balancer = kafka.BalancerFunc(func(m kafka.Message, _ ...int) int {
		p, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(string(m.Key), "-", 2)[0], "p"))
		return p
	})
	for _, kind := range kinds {
		var msgs []kafka.Message
		for p := range parts {
			k := "p" + strconv.Itoa(p) + "-" + kind
			msgs = append(msgs, kafka.Message{Topic: topic, Key: []byte(k), Value: []byte(k + "|0|")})
		}
		if err := w.WriteMessages(context.Background(), msgs...); err != nil {
			tb.Fatalf("produce: %v", err)
		}
	}
}

// handler returns member's handler: it logs each call; a record whose key
// ends in "-block" runs until its context is cancelled.
func (h *handleLog) handler(member string) HandlerFunc[seqRec] {
	return func(ctx context.Context, r *Record[seqRec]) error {
		h.begin(member, r.Value.key)
		defer h.end(member, r.Value.key)
		if strings.HasSuffix(r.Value.key, "-block") {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
}

// drainConfig is baseConfig with the broker's shortest session and no
// periodic commits: every commit is a generation's final commit.
func drainConfig(tb testing.TB, brokers []string, topic string) Config {
	cfg := baseConfig(tb, brokers, topic)
	cfg.SessionTimeout = 6 * time.Second
	cfg.HeartbeatInterval = 500 * time.Millisecond
	cfg.CommitInterval = time.Hour
	return cfg
}

// startMember runs a consumer of cfg as member, with hl's handler and a
// genLog as its logger, and returns the log and the consumer's stop.
func startMember(tb testing.TB, cfg Config, hl *handleLog, member string) (*genLog, func()) {
	tb.Helper()
	gl := &genLog{}
	cfg.Logger = slog.New(gl)
	c, err := New(cfg, decodeSeq, hl.handler(member))
	if err != nil {
		tb.Fatal(err)
	}
	return gl, runConsumer(tb, c)
}

// blocked reports an error unless n block records are running and each
// of members runs at least one of them. Naming the members makes a test
// wait for a generation that holds all of them: a first member alone can
// run every record before the others have joined, and the others' joins
// are then still to come.
func (h *handleLog) blocked(n int, members ...string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.running) != n {
		return fmt.Errorf("%d block records running, want %d", len(h.running), n)
	}
	for _, m := range members {
		found := false
		for _, r := range h.running {
			found = found || r == m
		}
		if !found {
			return fmt.Errorf("member %s runs none of the %d block records", m, n)
		}
	}
	return nil
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
	producePerPartition(t, brokers, topic, parts, "fast", "block")
	hl := &handleLog{running: map[string]string{}}
	cfg := drainConfig(t, brokers, topic)
	cfg.RebalanceTimeout = 20 * time.Second
	cfg.DrainTimeout = 9 * time.Second
	start := func(member string) (*genLog, func()) { return startMember(t, cfg, hl, member) }
	glA, stopA := start("A")
	glB, stopB := start("B")
	// Wait until every block record runs, on A and B both.
	testkit.Eventually(t, 60*time.Second, func() error { return hl.blocked(parts, "A", "B") })
	joined := time.Now()
	glC, stopC := start("C")
	defer func() { // the three drains run in parallel, not one after the other
		var wg sync.WaitGroup
		for _, stop := range []func(){stopA, stopB, stopC} {
			wg.Go(stop)
		}
		wg.Wait()
	}()

	var oldEnd time.Time
	testkit.Eventually(t, 60*time.Second, func() error {
		a, okA := glA.endAfter(joined)
		b, okB := glB.endAfter(joined)
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
	// The joining member fetches nothing before it has a generation.
	if joinC, _ := glC.firstJoin(); joinC.Before(oldEnd) {
		t.Errorf("member C joined its first generation %s before the old generations returned", oldEnd.Sub(joinC).Round(time.Millisecond))
	}
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

// TestDrainEndsWhenMembershipLost: a member whose handlers are blocked
// until cancelled is removed from the group by the coordinator (here by a
// LeaveGroup naming it). Its partitions may go to another member at once,
// so it must cancel its handlers and end its generation at once instead of
// draining for DrainTimeout (20s).
func TestDrainEndsWhenMembershipLost(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	const parts = 2
	topic := testkit.Topic(t, brokers, parts)
	producePerPartition(t, brokers, topic, parts, "block")
	hl := &handleLog{running: map[string]string{}}
	cfg := drainConfig(t, brokers, topic)
	cfg.RebalanceTimeout = 30 * time.Second
	cfg.DrainTimeout = 20 * time.Second
	gl, _ := startMember(t, cfg, hl, "A")
	testkit.Eventually(t, 60*time.Second, func() error { return hl.blocked(parts) })

	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	removed := time.Now()
	res, err := client.LeaveGroup(context.Background(), &kafka.LeaveGroupRequest{
		GroupID: cfg.GroupID, Members: []kafka.LeaveGroupRequestMember{{ID: gl.memberID()}}})
	if err == nil {
		err = res.Error
	}
	if err == nil && len(res.Members) > 0 {
		err = res.Members[0].Error
	}
	if err != nil {
		t.Fatalf("remove member %s: %v", gl.memberID(), err)
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		if _, ok := gl.firstEnd(); !ok {
			return fmt.Errorf("generation not ended %s after the member was removed", time.Since(removed).Round(time.Millisecond))
		}
		return nil
	})
	// kafka-go learns of the removal at its next heartbeat, the drain at
	// the drain's first heartbeat: two intervals, plus slack.
	if ended, _ := gl.firstEnd(); ended.Sub(removed) > 3*time.Second {
		t.Errorf("generation ended %s after the member was removed, want within 3s (drain timeout %s); consumer warnings: %q",
			ended.Sub(removed).Round(time.Millisecond), cfg.DrainTimeout, gl.warningLines())
	}
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"github.com/notiflow/notiflow/lib/fence"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/consume"
	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/dispatcher/internal/dispatchtest"
)

// binary is the dispatcher binary, built once per test binary.
func binary(tb testing.TB) string {
	tb.Helper()
	if path := os.Getenv("DISPATCH_BENCH_BINARY"); path != "" {
		return path // benchmarks only: compare another build
	}
	return testkit.Binary(tb, ".")
}

func TestMain(m *testing.M) { os.Exit(testkit.RunTests(m)) }

// proc is a dispatcher subprocess serving HTTP on addr.
type proc struct {
	*testkit.Proc
	addr string
}

// startProc runs the binary with env on a free port (testkit.StartProc:
// NOTIFLOW_* of the test process are not inherited, SIGKILL at cleanup).
func startProc(tb testing.TB, name string, env map[string]string) *proc {
	tb.Helper()
	addr := testkit.FreeAddr(tb)
	env["NOTIFLOW_HTTP_ADDR"] = addr
	vars := make([]string, 0, len(env))
	for k, v := range env {
		vars = append(vars, k+"="+v)
	}
	return &proc{Proc: testkit.StartProc(tb, name, binary(tb), vars...), addr: addr}
}

func (p *proc) get(path string) (int, string, error) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + p.addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// metric returns the sum of the series of name on p's /metrics.
func (p *proc) metric(name string) float64 {
	_, body, err := p.get("/metrics")
	if err != nil {
		return -1
	}
	sum := 0.0
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

func (p *proc) waitReady(tb testing.TB) {
	tb.Helper()
	testkit.Eventually(tb, 60*time.Second, func() error {
		code, body, err := p.get("/readyz")
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("%s /readyz: %d %q %v", p.Name, code, body, err)
		}
		return nil
	})
}

// baseEnv is the configuration of a test's dispatcher processes.
func baseEnv(tb testing.TB, partitions int) map[string]string {
	brokers := testkit.KafkaBrokers(tb)
	rdb, prefix := testkit.Redis(tb)
	// No scheduler runs here, so no target was ever changed: the fences'
	// copy is complete and empty.
	if err := fence.MarkSynced(context.Background(), rdb, prefix); err != nil {
		tb.Fatal(err)
	}
	return map[string]string{
		"NOTIFLOW_KAFKA_BROKERS":    strings.Join(brokers, ","),
		"NOTIFLOW_KAFKA_PARTITIONS": strconv.Itoa(partitions),
		"NOTIFLOW_TOPIC_DUE":        testkit.Topic(tb, brokers, partitions),
		"NOTIFLOW_TOPIC_DISPATCHED": testkit.Topic(tb, brokers, partitions),
		"NOTIFLOW_TOPIC_DLQ":        testkit.Topic(tb, brokers, 1),
		"NOTIFLOW_GROUP":            testkit.Group(tb),
		"NOTIFLOW_REDIS_ADDR":       testkit.RedisAddr(tb),
		"NOTIFLOW_REDIS_PREFIX":     prefix,
		"NOTIFLOW_WEBHOOK_ALLOW":    "127.0.0.1/32",
		"NOTIFLOW_COMMIT_INTERVAL":  "100ms",
		"NOTIFLOW_DRAIN_TIMEOUT":    "5s",
		"NOTIFLOW_SHUTDOWN_TIMEOUT": "15s",
		"NOTIFLOW_LOG_LEVEL":        "info",
	}
}

// Two dispatcher processes share the group; one is SIGKILLed mid-run.
// Every notification still gets a result, every recipient's notifications
// reach the receiver in order, and a notification is only sent again when
// the killed process may have sent it without marking it done (its first
// call came before the kill). The survivor then stops cleanly on SIGTERM.
func TestTwoProcessesOneKilled(t *testing.T) {
	t.Parallel()
	const partitions, recipients, perRecipient = 6, 150, 20
	env := baseEnv(t, partitions)
	env["NOTIFLOW_INFLIGHT_TTL"] = "2s"
	env["NOTIFLOW_WORKERS"] = "8"
	rcv := testkit.NewReceiver(t, func(testkit.Call, int) int {
		time.Sleep(3 * time.Millisecond)
		return http.StatusOK
	})
	brokers := strings.Split(env["NOTIFLOW_KAFKA_BROKERS"], ",")
	results := dispatchtest.Collect(t, brokers, env["NOTIFLOW_TOPIC_DISPATCHED"], partitions)

	a := startProc(t, "a", env)
	b := startProc(t, "b", env)
	a.waitReady(t)
	b.waitReady(t)
	// Produce only once both hold their partitions: a rebalance while the
	// backlog is being handled would cancel handlers at its drain deadline
	// and cause re-sends that have nothing to do with the kill measured
	// here.
	waitGroupStable(t, strings.Split(env["NOTIFLOW_KAFKA_BROKERS"], ","), env["NOTIFLOW_GROUP"], 2)

	var dues []*notiflowv1.NotificationDue
	for s := range perRecipient {
		for r := range recipients {
			dues = append(dues, dispatchtest.Due(fmt.Sprintf("k-%d-%d", r, s), fmt.Sprintf("r%d", r), uint64(s+1), notiflowv1.Channel_CHANNEL_WEBHOOK, "bench", rcv.URL+"/hook", ""))
		}
	}
	dispatchtest.Produce(t, brokers, env["NOTIFLOW_TOPIC_DUE"], dues)

	// Kill a once it is busy and a good share is done.
	testkit.Eventually(t, 60*time.Second, func() error {
		if n := results.Len(); n < len(dues)/4 || a.metric("notiflow_dispatcher_results_total") < 1 {
			return fmt.Errorf("%d results, a has %v", n, a.metric("notiflow_dispatcher_results_total"))
		}
		return nil
	})
	if err := a.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill a: %v", err)
	}
	killedAt := time.Now()
	<-a.Done()
	t.Logf("killed a after %d results", results.Len())

	// Every notification gets a result.
	var rs []*notiflowv1.NotificationDispatched
	testkit.Eventually(t, 120*time.Second, func() error {
		rs = dispatchtest.Results(t, results.Records())
		ids := map[string]bool{}
		for _, r := range rs {
			ids[r.NotificationId] = true
		}
		if len(ids) < len(dues) {
			return fmt.Errorf("%d of %d notifications have a result", len(ids), len(dues))
		}
		return nil
	})

	// Results topic: first results per notification in order per recipient.
	seen := map[string]bool{}
	var recs []string
	var seqs []uint64
	statuses := map[notiflowv1.Status]int{}
	for _, r := range rs {
		statuses[r.Status]++
		if r.Status != notiflowv1.Status_STATUS_DELIVERED && r.Status != notiflowv1.Status_STATUS_DUPLICATE {
			t.Fatalf("%s: %s (%s)", r.NotificationId, r.Status, r.Error)
		}
		if !seen[r.NotificationId] {
			seen[r.NotificationId] = true
			recs, seqs = append(recs, r.RecipientId), append(seqs, r.Sequence)
		}
	}
	if err := dispatchtest.CheckOrder(recs, seqs); err != nil {
		t.Fatalf("results topic: %v", err)
	}

	// Receiver: first calls in order per recipient, complete; repeats only
	// of notifications a may have sent. A request a wrote just before
	// SIGKILL is read by the receiver a little later (the bytes wait in
	// its socket buffer), so a call arriving up to killGrace after the
	// kill may still be a's. The survivor cannot take over a's partitions
	// before a's session has timed out, so a grace of a tenth of that
	// (1 s) hides no re-send of the takeover.
	const killGrace = consume.DefaultSessionTimeout / 10
	calls := rcv.Calls()
	first := map[string]time.Time{}
	recs, seqs = recs[:0], seqs[:0]
	resent := 0
	for _, c := range calls {
		if at, ok := first[c.NotificationID]; ok {
			resent++
			if at.After(killedAt.Add(killGrace)) {
				t.Fatalf("%s sent again although its first send (%s) came %v after the kill (%s)", c.NotificationID, at.Format(time.StampMicro), at.Sub(killedAt), killedAt.Format(time.StampMicro))
			}
			continue
		}
		first[c.NotificationID] = c.At
		recs, seqs = append(recs, c.RecipientID), append(seqs, c.Sequence)
	}
	if len(first) != len(dues) {
		t.Fatalf("receiver saw %d notifications, want %d", len(first), len(dues))
	}
	if err := dispatchtest.CheckOrder(recs, seqs); err != nil {
		t.Fatalf("receiver: %v", err)
	}
	t.Logf("%d results (%v), %d calls, %d sent again after the kill (at most a's in-flight work)", len(rs), statuses, len(calls), resent)
	if resent > 8 {
		t.Fatalf("%d notifications sent twice; a had at most 8 workers sending", resent)
	}

	// The survivor drains and exits 0 on SIGTERM, within the shutdown timeout.
	if err := b.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Done():
		if err := b.Err(); err != nil {
			t.Fatalf("b exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("b did not exit within 20s of SIGTERM")
	}
}

// waitGroupStable waits until the consumer group is Stable with members
// members, each of them assigned at least one partition.
func waitGroupStable(t *testing.T, brokers []string, group string, members int) {
	t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	testkit.Eventually(t, 60*time.Second, func() error {
		resp, err := client.DescribeGroups(context.Background(), &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
		if err != nil {
			return err
		}
		if len(resp.Groups) != 1 {
			return fmt.Errorf("%d groups described", len(resp.Groups))
		}
		g := resp.Groups[0]
		if g.Error != nil || g.GroupState != "Stable" || len(g.Members) != members {
			return fmt.Errorf("group %s: state %q, %d members, err %v", group, g.GroupState, len(g.Members), g.Error)
		}
		for _, m := range g.Members {
			n := 0
			for _, tp := range m.MemberAssignments.Topics {
				n += len(tp.Partitions)
			}
			if n == 0 {
				return fmt.Errorf("member %s has no partition", m.MemberID)
			}
		}
		return nil
	})
}

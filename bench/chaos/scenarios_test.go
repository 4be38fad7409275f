package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/bench/harness"
)

// Scenario sizes: every scenario drives this many notifications to this
// many recipients, due over spread.
const (
	notifications = 20_000
	recipients    = 2_000
	spread        = 10 * time.Second
	lead          = 4 * time.Second
)

// scenario is one fault and when to inject it.
type scenario struct {
	id     int
	name   string
	layout layout
	// inject runs during the run and returns when the fault is over (the
	// recovery clock starts then); dlq is what must end on the DLQ.
	inject func(t *testing.T, w *world) (dlq map[string]string)
}

var scenarios = []scenario{
	{1, "kill-dispatcher", layout{2, 2}, func(t *testing.T, w *world) map[string]string {
		must(t, w.waitPersisted(0.1+0.4*rand.Float64(), 2*time.Minute))
		d := w.stack.Procs("dispatcher")[0]
		d.Kill()
		time.Sleep(time.Second)
		must(t, d.Restart(context.Background()))
		return nil
	}},
	{2, "kill-sink", layout{2, 2}, func(t *testing.T, w *world) map[string]string {
		must(t, w.waitPersisted(0.1+0.4*rand.Float64(), 2*time.Minute))
		s := w.stack.Procs("sink")[0]
		s.Kill()
		time.Sleep(time.Second)
		must(t, s.Restart(context.Background()))
		return nil
	}},
	{3, "kill-lock-holder", layout{2, 2}, func(t *testing.T, w *world) map[string]string {
		for _, frac := range []float64{0.15, 0.55} { // mid-claim, then the new holder mid-relay
			must(t, w.waitOutbox(frac, 2*time.Minute))
			holder := w.lockHolder(t)
			holder.Kill()
			go func() { time.Sleep(2 * time.Second); _ = holder.Restart(context.Background()) }()
		}
		return nil
	}},
	{4, "three-schedulers", layout{3, 2}, func(t *testing.T, w *world) map[string]string {
		must(t, w.waitPersisted(0.5, 2*time.Minute))
		return nil
	}},
	{5, "mariadb-stopped-20s", layout{2, 2}, func(t *testing.T, w *world) map[string]string {
		must(t, w.waitPersisted(0.2, 2*time.Minute))
		w.outage("mariadb", 20*time.Second)
		return nil
	}},
	{6, "redis-stopped-20s", layout{2, 2}, func(t *testing.T, w *world) map[string]string {
		must(t, w.waitPersisted(0.2, 2*time.Minute))
		w.outage("redis", 20*time.Second)
		return nil
	}},
	{7, "kafka-restarted", layout{2, 2}, func(t *testing.T, w *world) map[string]string {
		must(t, w.waitPersisted(0.2, 2*time.Minute))
		w.outage("kafka", 0)
		return nil
	}},
	{8, "receiver-503-30s", layout{2, 2}, func(t *testing.T, w *world) map[string]string {
		must(t, w.waitPersisted(0.2, 2*time.Minute))
		w.recv.SetFailing(true)
		time.Sleep(30 * time.Second)
		w.recv.SetFailing(false)
		return nil
	}},
	{9, "poison-both-topics", layout{2, 2}, func(t *testing.T, w *world) map[string]string {
		must(t, w.waitPersisted(0.2, 2*time.Minute))
		return w.injectPoison(t)
	}},
	{10, "rolling-restart", layout{2, 2}, func(t *testing.T, w *world) map[string]string {
		must(t, w.waitPersisted(0.1, 2*time.Minute))
		for _, p := range w.stack.Procs("") {
			if err := p.Term(30 * time.Second); err != nil {
				t.Errorf("%s: graceful stop: %v", p.Name, err)
			}
			must(t, p.Restart(context.Background()))
		}
		return nil
	}},
	{11, "hot-partition-kafka-restarted", layout{2, 2}, func(t *testing.T, w *world) map[string]string {
		// The broker is stopped as the burst reaches the outbox: relay
		// passes fail while it stops and is down, the burst piles up in the
		// outbox and is published, in relay batches holding several writer
		// batches of the hot partition, while the broker comes back.
		must(t, w.waitOutbox(0.05, 2*time.Minute))
		published := w.schedulerSum("notiflow_scheduler_published_total")
		w.outage("kafka", 0)
		restarted := time.Now()
		t.Logf("published when the broker was stopped: %.0f of %d; relay passes failed: %.0f",
			published, w.n, w.schedulerSum("notiflow_scheduler_relay_errors_total"))
		t.Cleanup(func() { // after verify: how long the relay took to catch up
			var at time.Time
			if err := w.db.QueryRow(`SELECT updated_at FROM outbox_relay WHERE id = 1`).Scan(&at); err == nil {
				t.Logf("relay cursor last moved %.1fs after the broker was back", at.Sub(restarted).Seconds())
			}
		})
		return nil
	}},
	{12, "dead-endpoint-rebalance", layout{2, 2}, deadEndpointRebalance},
}

// deadEndpointRebalance makes the webhook endpoint hang while the group
// rebalances twice, a dispatcher joining and then one leaving: the members
// drain with handlers stuck on the endpoint for their whole drain timeout,
// longer than the session timeout. No record may run on two members at
// once: when the endpoint recovers, each notification reaches it once
// (receiver_raw_repeats 0).
func deadEndpointRebalance(t *testing.T, w *world) map[string]string {
	// Checked once everything settled, before the processes stop; the
	// member that leaves is read before it goes.
	waits := map[string]float64{}
	w.checks = append(w.checks, func() []string { return checkDrains(w.stack.Procs("dispatcher"), waits) })
	must(t, w.waitPersisted(0.2, 2*time.Minute))
	w.recv.SetHanging(true)
	defer w.recv.SetHanging(false)
	must(t, waitFor(time.Minute, func() bool { return w.recv.Held() >= 20 }))
	env := harness.Merge(w.iso.ServiceEnv("dispatcher"), scenarioEnv["dispatcher"], nil)
	joining, err := w.stack.Start(context.Background(), "dispatcher-3", "dispatcher", env)
	if err != nil {
		t.Fatalf("start dispatcher-3: %v", err)
	}
	// The joining member gets its generation once the others drained
	// (NOTIFLOW_DRAIN_TIMEOUT, 15s, the endpoint dead throughout); then a
	// member leaves, draining again with the endpoint still dead.
	must(t, waitFor(time.Minute, func() bool {
		return metricValue(joining.Addr, "notiflow_consumer_rebalances_total") >= 1
	}))
	leaving := w.stack.Procs("dispatcher")[0]
	waits[leaving.Name] = metricValue(leaving.Addr, "notiflow_dispatcher_inflight_waits_total")
	if err := leaving.Term(30 * time.Second); err != nil {
		t.Errorf("dispatcher-1: graceful stop: %v", err)
	}
	return nil
}

// checkDrains returns what shows that a record ran on two dispatchers at
// once, or that the fault did not happen. From every dispatcher (read now
// if it runs, else from stopped, read before it stopped): none found a
// record claimed in Redis by another (notiflow_dispatcher_inflight_waits_total
// 0: a new owner started a record an old owner still ran). From every
// dispatcher's log: no commit was refused (a member expelled mid-drain),
// and at least one drain ran into its deadline (handlers held on the dead
// endpoint for longer than the session timeout).
func checkDrains(procs []*harness.Proc, stopped map[string]float64) []string {
	var problems []string
	deadlines := 0
	for _, p := range procs {
		n, read := stopped[p.Name]
		if p.Running() {
			n, read = metricValue(p.Addr, "notiflow_dispatcher_inflight_waits_total"), true
		}
		if read && n != 0 {
			problems = append(problems, fmt.Sprintf("%s: notiflow_dispatcher_inflight_waits_total %v, want 0: a record ran on two members at once", p.Name, n))
		}
		b, err := os.ReadFile(p.LogPath)
		if err != nil {
			problems = append(problems, fmt.Sprintf("read %s log: %v", p.Name, err))
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			switch {
			case strings.Contains(line, `"msg":"drain deadline passed`):
				deadlines++
			case strings.Contains(line, `"msg":"final commit"`), strings.Contains(line, `"msg":"commit offsets"`):
				problems = append(problems, fmt.Sprintf("%s: a commit was refused: %s", p.Name, line))
			}
		}
	}
	if deadlines == 0 {
		problems = append(problems, "no drain ran into its deadline: no handler was held on the dead endpoint through a rebalance")
	}
	return problems
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("condition not met within %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// loads overrides the recipients and spread of a scenario's targets.
var loads = map[int]struct {
	recipients []string
	spread     time.Duration
}{
	// Scenario 11: 100 recipients, 60 of them on partition 0, so that a
	// relay batch of 5,000 rows holds about 3,000 of that partition (three
	// of kafka-go's 1,000-record writer batches) while each recipient has
	// 200 notifications; all due within the same second, so that the claims
	// fill the outbox in one burst.
	11: {recipients: hotRecipients(60, 40), spread: time.Second},
}

// hotRecipients returns hot recipient ids that murmur2 maps to partition 0
// of the scenario topics, then cold ids that it maps to other partitions.
func hotRecipients(hot, cold int) []string {
	parts := make([]int, topicPartitions)
	for i := range parts {
		parts[i] = i
	}
	var hots, colds []string
	for i := 0; len(hots) < hot || len(colds) < cold; i++ {
		id := recipientID(i)
		switch p := (kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: []byte(id)}, parts...); {
		case p == 0 && len(hots) < hot:
			hots = append(hots, id)
		case p != 0 && len(colds) < cold:
			colds = append(colds, id)
		}
	}
	return append(hots, colds...)
}

// schedulerSum adds up a counter over the running schedulers.
func (w *world) schedulerSum(metric string) float64 {
	var sum float64
	for _, p := range w.stack.Procs("scheduler") {
		if v := metricValue(p.Addr, metric); v > 0 {
			sum += v
		}
	}
	return sum
}

// selected reports whether NOTIFLOW_CHAOS selects scenario id: "all", a
// comma-separated list of scenario numbers, or unset for the trimmed set.
func selected(id int) bool {
	v := os.Getenv("NOTIFLOW_CHAOS")
	switch v {
	case "all":
		return true
	case "":
		return trimmed[id]
	}
	for _, f := range strings.Split(v, ",") {
		if strings.TrimSpace(f) == strconv.Itoa(id) {
			return true
		}
	}
	return false
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// trimmed is the set that runs inside make test.
var trimmed = map[int]bool{1: true, 2: true, 9: true}

func TestChaos(t *testing.T) {
	var mu sync.Mutex
	var results []outcome
	for _, sc := range scenarios {
		if !selected(sc.id) {
			continue
		}
		t.Run(fmt.Sprintf("%02d-%s", sc.id, sc.name), func(t *testing.T) {
			w := newWorld(t, strings.ReplaceAll(sc.name, "-", "_"), sc.layout)
			rcpts, sp := recipients, spread
			if l, ok := loads[sc.id]; ok {
				w.names, rcpts, sp = l.recipients, len(l.recipients), l.spread
			}
			w.createTargets(notifications, rcpts, lead, sp)
			dlq := sc.inject(t, w)
			faultOver := time.Now()
			w.settle(4*time.Minute, 3*time.Second)
			o := w.verify(fmt.Sprintf("%d %s", sc.id, sc.name), time.Since(faultOver), dlq)
			for _, check := range w.checks {
				if problems := check(); len(problems) > 0 {
					o.Problems = append(o.Problems, problems...)
					o.Pass = false
				}
			}
			mu.Lock()
			results = append(results, o)
			mu.Unlock()
			b, _ := json.Marshal(o)
			t.Logf("outcome: %s", b)
			if !o.Pass {
				t.Errorf("scenario failed: %v", o.Problems)
			}
		})
	}
	writeResults(t, results)
}

func writeResults(t *testing.T, results []outcome) {
	if len(results) == 0 {
		return
	}
	path := filepath.Join(repoRoot, "bench", "results", "chaos-latest.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Errorf("create results dir: %v", err)
		return
	}
	b, _ := json.MarshalIndent(map[string]any{"time": time.Now().UTC(), "notifications": notifications, "scenarios": results}, "", "  ")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Errorf("write %s: %v", path, err)
	}
	fmt.Printf("%-26s %8s %9s %5s %10s %12s %11s %9s %5s\n", "scenario", "expected", "persisted", "lost", "duplicates", "out_of_order", "raw_repeats", "recovery", "pass")
	for _, o := range results {
		fmt.Printf("%-26s %8d %9d %5d %10d %12d %11d %8.1fs %5v\n", o.Scenario, o.Expected, o.Persisted, o.Lost, o.Duplicates, o.OutOfOrder, o.RawRepeats, o.RecoverySeconds, o.Pass)
	}
}

// outage stops a shared dependency for d (0: restart at once) and starts
// it again. Cleanup makes sure it runs again even when the test fails.
func (w *world) outage(service string, d time.Duration) {
	w.t.Cleanup(func() { w.depsScript("up") })
	w.depsScript("stop", service)
	time.Sleep(d)
	w.depsScript("start", service)
}

// lockHolder finds the scheduler that holds the scan lock from its metrics.
func (w *world) lockHolder(t *testing.T) *harness.Proc {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, p := range w.stack.Procs("scheduler") {
			if p.Running() && metricValue(p.Addr, "notiflow_scheduler_lock_held") == 1 {
				return p
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("no scheduler reports holding the lock")
	return nil
}

// injectPoison writes garbage, a tombstone, an unknown schema version and an
// oversized value to both topics and returns the dead letters expected: the
// tombstones are skipped, not dead lettered.
func (w *world) injectPoison(t *testing.T) map[string]string {
	t.Helper()
	// A transport of its own: kafka-go's default one is shared by the whole
	// test process and answers from a metadata cache refreshed every 6 s,
	// which may predate the topics the services created for this scenario
	// (the write then fails with Unknown Topic Or Partition).
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	wr := &kafka.Writer{Addr: kafka.TCP(w.deps.Kafka), Transport: tr, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, Balancer: &kafka.Murmur2Balancer{}}
	defer wr.Close()
	want := map[string]string{}
	var msgs []kafka.Message
	for _, topic := range []string{w.iso.TopicDue, w.iso.TopicDispatched} {
		short := "due"
		if topic == w.iso.TopicDispatched {
			short = "dispatched"
		}
		msgs = append(msgs,
			kafka.Message{Topic: topic, Key: []byte("poison-garbage-" + short), Value: []byte{0xff, 0x00, 0x13, 0x37, 0xde, 0xad}},
			kafka.Message{Topic: topic, Key: []byte("poison-tombstone-" + short), Value: nil},
			kafka.Message{Topic: topic, Key: []byte("poison-schema-" + short), Value: []byte{0x0a, 0x01, 0x78},
				Headers: []kafka.Header{{Key: "schema-version", Value: []byte("99")}}},
			kafka.Message{Topic: topic, Key: []byte("poison-oversized-" + short), Value: make([]byte, 1_000_500)},
		)
		want["poison-garbage-"+short] = "decode"
		want["poison-schema-"+short] = "unknown schema version"
		want["poison-oversized-"+short] = "size limit"
	}
	wr.BatchBytes = 2 << 20
	for _, m := range msgs {
		if err := wr.WriteMessages(context.Background(), m); err != nil {
			t.Fatalf("write poison %s: %v", m.Key, err)
		}
	}
	return want
}

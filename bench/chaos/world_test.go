package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/bench/harness"
	"github.com/notiflow/notiflow/lib/testkit"
)

var (
	binDir   string
	repoRoot string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	root, err := harness.Root()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	repoRoot = root
	dir, err := os.MkdirTemp("", "notiflow-chaos-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := harness.Build(ctx, root, binDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// topicPartitions is the partition count of every scenario topic.
const topicPartitions = 12

// layout says how many processes of each service a scenario runs.
type layout struct {
	schedulers, dispatchers int
}

// worldOpts are a test's additions to a scenario world.
type worldOpts struct {
	// respond, when set, answers the webhook receiver's calls (200
	// without it).
	respond testkit.Respond
	// env adds settings per service.
	env map[string]map[string]string
}

// world is one scenario's running system and what it expects.
type world struct {
	t      *testing.T
	deps   harness.Deps
	iso    harness.Isolation
	stack  *harness.Stack
	recv   *testkit.Receiver
	admin  *harness.Admin
	db     *sql.DB
	n      int
	dueLo  time.Time
	dueHi  time.Time
	hooks  map[int64]bool // target id -> webhook channel
	expect map[occ]bool
	names  []string // recipient ids when the scenario chooses them
	// checks are a scenario's own checks, run once everything settled;
	// each returns its problems, which fail the scenario's outcome.
	checks []func() []string
}

// occ identifies an occurrence: target id and occurrence time (µs).
type occ struct {
	target int64
	at     int64
}

func newWorld(t *testing.T, name string, l layout) *world {
	t.Helper()
	return newWorldWith(t, name, l, worldOpts{})
}

func newWorldWith(t *testing.T, name string, l layout, o worldOpts) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{t: t, deps: harness.LocalDeps(), iso: harness.NewIsolation(fmt.Sprintf("chaos_%s_%d", name, time.Now().UnixNano()%1e9))}
	if err := w.iso.Create(ctx, w.deps); err != nil {
		t.Fatalf("create database: %v", err)
	}
	// Runs last: after the services stopped. A failed scenario's database
	// and Redis keys stay for inspection; a passed one's are removed, so
	// that repeated runs leave nothing behind in the shared dependencies.
	t.Cleanup(func() {
		ctx := context.Background()
		_ = w.iso.DeleteTopics(ctx, w.deps)
		if t.Failed() {
			t.Logf("kept database %s and redis keys %s* for inspection", w.iso.Database, w.iso.RedisPrefix)
			return
		}
		if err := w.iso.Remove(ctx, w.deps); err != nil {
			t.Errorf("remove the scenario's database and redis keys: %v", err)
		}
	})
	token := "chaos-" + w.iso.Name
	base, err := w.iso.Env(w.deps, topicPartitions, token)
	if err != nil {
		t.Fatal(err)
	}
	recv, err := testkit.StartReceiver(o.respond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = recv.Close() })
	w.recv = recv
	logDir := filepath.Join(t.TempDir(), "logs")
	w.stack, err = harness.NewStack(binDir, logDir, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range w.stack.Procs("") {
				t.Logf("---- %s log tail:\n%s", p.Name, p.LogTail(15))
			}
		}
		w.stack.StopAll(30 * time.Second)
	})
	start := func(name, service string, extra map[string]string) {
		t.Helper()
		env := harness.Merge(w.iso.ServiceEnv(service), scenarioEnv[service], o.env[service], extra)
		if _, err := w.stack.Start(ctx, name, service, env); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
	}
	start("sink", "sink", nil)
	for i := 1; i <= l.dispatchers; i++ {
		start(fmt.Sprintf("dispatcher-%d", i), "dispatcher", nil)
	}
	for i := 1; i <= l.schedulers; i++ {
		start(fmt.Sprintf("scheduler-%d", i), "scheduler", nil)
	}
	sched := w.stack.Procs("scheduler")[0]
	w.admin = &harness.Admin{Base: "http://" + sched.Addr, Token: token}
	dsn, err := w.iso.DSN(w.deps)
	if err != nil {
		t.Fatal(err)
	}
	if w.db, err = sql.Open("mysql", dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.db.Close() })
	return w
}

// scenarioEnv tunes the services for a test run: shorter lock and in-flight
// expiries so that takeovers happen within the test's patience.
var scenarioEnv = map[string]map[string]string{
	"scheduler":  {"NOTIFLOW_LOCK_TTL": "4s", "NOTIFLOW_TICK": "500ms"},
	"dispatcher": {"NOTIFLOW_INFLIGHT_TTL": "5s", "NOTIFLOW_SIM_LATENCY": "1ms", "NOTIFLOW_BREAKER_COOLDOWN": "2s", "NOTIFLOW_WEBHOOK_BACKOFF_MAX": "2s"},
	"sink":       {},
}

// createTargets creates n one-shot targets through the bulk API over
// recipients recipients, alternating webhook (to the receiver) and inbox,
// due spread evenly over spread starting lead from now.
func (w *world) createTargets(n, recipients int, lead, spread time.Duration) {
	w.t.Helper()
	w.n = n
	w.hooks = map[int64]bool{}
	w.expect = map[occ]bool{}
	base := time.Now().Add(lead).Truncate(time.Second)
	w.dueLo, w.dueHi = base, base.Add(spread)
	const chunk = 5000
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		type target struct {
			RecipientID string            `json:"recipient_id"`
			Channel     string            `json:"channel"`
			WebhookURL  string            `json:"webhook_url,omitempty"`
			TemplateID  string            `json:"template_id"`
			Params      map[string]string `json:"params"`
			DueAt       string            `json:"due_at"`
		}
		req := struct {
			Targets []target `json:"targets"`
		}{}
		dues := make([]time.Time, 0, hi-lo)
		for i := lo; i < hi; i++ {
			due := base.Add(time.Duration(int64(spread) * int64(i) / int64(n))).Truncate(time.Second)
			tg := target{RecipientID: w.recipient(i % recipients), Channel: "inbox", TemplateID: "welcome",
				Params: map[string]string{"name": fmt.Sprintf("user %d", i)}, DueAt: due.UTC().Format(time.RFC3339Nano)}
			if i%2 == 0 {
				tg.Channel, tg.WebhookURL = "webhook", w.recv.URL+"/hook"
			}
			req.Targets = append(req.Targets, tg)
			dues = append(dues, due)
		}
		var resp struct {
			IDs []int64 `json:"ids"`
		}
		if err := w.admin.Do(context.Background(), http.MethodPost, "/v1/targets:bulk", req, &resp); err != nil {
			w.t.Fatalf("bulk create: %v", err)
		}
		if len(resp.IDs) != hi-lo {
			w.t.Fatalf("bulk create returned %d ids for %d targets", len(resp.IDs), hi-lo)
		}
		for k, id := range resp.IDs {
			w.expect[occ{id, dues[k].UnixMicro()}] = true
			w.hooks[id] = req.Targets[k].Channel == "webhook"
		}
	}
}

// recipient is the id of the i-th recipient: w.names[i] when the scenario
// chose them, else r00000, r00001, ...
func (w *world) recipient(i int) string {
	if w.names != nil {
		return w.names[i]
	}
	return recipientID(i)
}

func recipientID(i int) string { return fmt.Sprintf("r%05d", i) }

// persisted counts distinct occurrences in the notifications table.
func (w *world) persisted() (int, error) {
	var n int
	err := w.db.QueryRow(`SELECT COUNT(DISTINCT target_id, occurrence_at) FROM notifications`).Scan(&n)
	return n, err
}

// waitPersisted polls until frac of the expected occurrences are persisted.
func (w *world) waitPersisted(frac float64, timeout time.Duration) error {
	want := int(frac * float64(w.n))
	deadline := time.Now().Add(timeout)
	for {
		n, err := w.persisted()
		if err == nil && n >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("persisted %d of %d wanted within %s (last error %v)", n, want, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitOutbox polls until at least frac of the occurrences have outbox rows.
func (w *world) waitOutbox(frac float64, timeout time.Duration) error {
	want := int(frac * float64(w.n))
	deadline := time.Now().Add(timeout)
	for {
		var n int
		err := w.db.QueryRow(`SELECT COUNT(*) FROM outbox`).Scan(&n)
		if err == nil && n >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("outbox has %d of %d wanted within %s (last error %v)", n, want, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settle waits until everything expected is persisted and the webhook
// receiver has seen every webhook occurrence, then until nothing changes for
// quiet, so that late duplicates are seen too.
func (w *world) settle(timeout, quiet time.Duration) {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	lastRows, lastCalls, stableSince := -1, -1, time.Now()
	for time.Now().Before(deadline) {
		n, err := w.persisted()
		calls := len(w.recv.Calls())
		if err == nil && (n != lastRows || calls != lastCalls) {
			lastRows, lastCalls, stableSince = n, calls, time.Now()
		}
		if n >= w.n && time.Since(stableSince) >= quiet {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	w.t.Logf("not settled within %s: %d of %d persisted", timeout, lastRows, w.n)
}

// depsScript runs scripts/deps.sh with args (stop/start a shared service).
func (w *world) depsScript(args ...string) {
	w.t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot, "scripts", "deps.sh"), args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		w.t.Fatalf("deps.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// dlq reads every record of the run's dead-letter topic.
func (w *world) dlq() []kafka.Message {
	w.t.Helper()
	conn, err := kafka.DialLeader(context.Background(), "tcp", w.deps.Kafka, w.iso.TopicDLQ, 0)
	if err != nil {
		w.t.Fatalf("dial DLQ leader: %v", err)
	}
	parts, err := conn.ReadPartitions(w.iso.TopicDLQ)
	conn.Close()
	if err != nil {
		w.t.Fatalf("read DLQ partitions: %v", err)
	}
	var out []kafka.Message
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Go(func() {
			c, err := kafka.DialLeader(context.Background(), "tcp", w.deps.Kafka, w.iso.TopicDLQ, p.ID)
			if err != nil {
				return
			}
			defer c.Close()
			last, err := c.ReadLastOffset()
			if err != nil || last == 0 {
				return
			}
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{w.deps.Kafka}, Topic: w.iso.TopicDLQ, Partition: p.ID, MaxWait: 200 * time.Millisecond})
			defer r.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					return
				}
				mu.Lock()
				out = append(out, m)
				mu.Unlock()
				if m.Offset >= last-1 {
					return
				}
			}
		})
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

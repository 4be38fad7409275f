package ports_test

import (
	"context"
	"fmt"
	"github.com/notiflow/notiflow/lib/fence"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

// dispatcherPkg is the dispatcher's main package, from this package's
// folder.
const dispatcherPkg = "../../../../dispatcher"

// TestRedriveThroughDispatcher runs a real dispatcher process on the
// env's topics against a real webhook receiver and redrives its dead
// letters through the admin route:
//   - a notification already delivered, found in the DLQ, is redriven and
//     answered DUPLICATE: the receiver gets it once;
//   - one dead-lettered while its receiver was down is delivered once the
//     receiver is back;
//   - one whose receiver never answers returns to the DLQ with its redrive
//     count raised each time, and at the limit is skipped.
func TestRedriveThroughDispatcher(t *testing.T) {
	t.Parallel()
	const maxRedrives = 2
	e := newEnv(t, maxRedrives)
	rdb, prefix := testkit.Redis(t)
	// No scheduler runs here, so no target was ever changed: the fences'
	// copy is complete and empty.
	if err := fence.MarkSynced(context.Background(), rdb, prefix); err != nil {
		t.Fatal(err)
	}
	results := testkit.Topic(t, e.brokers, 1)
	var down atomic.Bool
	down.Store(true)
	rcv := testkit.NewReceiver(t, func(c testkit.Call, _ int) int {
		if c.Path == "/never" || (c.Path == "/flaky" && down.Load()) {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	addr := testkit.FreeAddr(t)
	d := testkit.StartProc(t, "dispatcher", testkit.Binary(t, dispatcherPkg),
		"NOTIFLOW_HTTP_ADDR="+addr, "NOTIFLOW_KAFKA_BROKERS="+strings.Join(e.brokers, ","), "NOTIFLOW_KAFKA_PARTITIONS=3",
		"NOTIFLOW_TOPIC_DUE="+e.due, "NOTIFLOW_TOPIC_DISPATCHED="+results, "NOTIFLOW_TOPIC_DLQ="+e.dlqTopic,
		"NOTIFLOW_GROUP="+testkit.Group(t), "NOTIFLOW_REDIS_ADDR="+testkit.RedisAddr(t), "NOTIFLOW_REDIS_PREFIX="+prefix,
		"NOTIFLOW_WEBHOOK_ALLOW=127.0.0.1/32", "NOTIFLOW_WEBHOOK_TIMEOUT=1s", "NOTIFLOW_WEBHOOK_MAX_ELAPSED=1s",
		"NOTIFLOW_WEBHOOK_BACKOFF_MIN=50ms", "NOTIFLOW_WEBHOOK_BACKOFF_MAX=200ms", "NOTIFLOW_BREAKER_FAILURES=1000",
		"NOTIFLOW_COMMIT_INTERVAL=100ms", "NOTIFLOW_LOG_LEVEL=warn")
	testkit.Eventually(t, 60*time.Second, func() error {
		select {
		case <-d.Done():
			t.Fatalf("the dispatcher exited: %v", d.Err())
		default:
		}
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})

	start := boundary(t)
	due := func(id, path string) *notiflowv1.NotificationDue {
		now := time.Now()
		return &notiflowv1.NotificationDue{NotificationId: id, TargetId: 1, RecipientId: "r-" + id, Channel: notiflowv1.Channel_CHANNEL_WEBHOOK,
			TemplateId: "bench", ParamsJson: []byte(`{"n":1}`), WebhookUrl: rcv.URL + path, DueAtUs: now.UnixMicro(),
			OccurrenceAtUs: now.UnixMicro(), Sequence: 1, CreatedAtUs: now.UnixMicro()}
	}
	produce(t, e, due("done-1", "/ok"), due("flaky-1", "/flaky"), due("never-1", "/never"))
	statuses := func(id string) []notiflowv1.Status { return resultStatuses(t, e.brokers, results, id) }
	waitStatuses(t, statuses, "done-1", notiflowv1.Status_STATUS_DELIVERED)
	waitStatuses(t, statuses, "flaky-1", notiflowv1.Status_STATUS_FAILED)
	waitStatuses(t, statuses, "never-1", notiflowv1.Status_STATUS_FAILED)

	// done-1 was delivered; put it in the DLQ as if a later step had
	// dead-lettered it (a record may reach the DLQ after its send).
	for _, m := range readN(t, e.brokers, e.due, 3, 3) {
		if string(m.Key) == "r-done-1" {
			e.deadLetter(t, "dispatcher", m, "after the send", 1)
		}
	}
	down.Store(false)
	window := func() redriveReq {
		return redriveReq{From: start, To: time.Now().Add(time.Second), Source: "dispatcher"}
	}
	dry := window()
	dry.DryRun = true
	got := strings.Split(keys(e.redrive(t, dry)), ",")
	slices.Sort(got)
	if strings.Join(got, ",") != "r-done-1:redrive,r-flaky-1:redrive,r-never-1:redrive" {
		t.Fatalf("dry run: %s", got)
	}
	run := e.redrive(t, window())
	if run.Redriven != 3 {
		t.Fatalf("first redrive: %s", keys(run))
	}
	waitStatuses(t, statuses, "done-1", notiflowv1.Status_STATUS_DELIVERED, notiflowv1.Status_STATUS_DUPLICATE)
	waitStatuses(t, statuses, "flaky-1", notiflowv1.Status_STATUS_FAILED, notiflowv1.Status_STATUS_DELIVERED)
	waitStatuses(t, statuses, "never-1", notiflowv1.Status_STATUS_FAILED, notiflowv1.Status_STATUS_FAILED)

	calls := map[string][]int{}
	for _, c := range rcv.Calls() {
		calls[c.NotificationID] = append(calls[c.NotificationID], c.Status)
	}
	if got := calls["done-1"]; len(got) != 1 || got[0] != http.StatusOK {
		t.Errorf("done-1 reached the receiver %v, want once (200): the redrive sent it again", got)
	}
	if got := calls["flaky-1"]; len(got) == 0 || got[len(got)-1] != http.StatusOK {
		t.Errorf("flaky-1 calls %v, want a last 200 after the redrive", got)
	}

	// never-1 failed again: it is back in the DLQ with count 1, the only
	// record the next redrive of the window takes; then count 2 is the
	// limit.
	for round := 1; round <= maxRedrives; round++ {
		var back []string
		testkit.Eventually(t, 30*time.Second, func() error {
			back = nil
			for _, r := range e.list(t, q(start, time.Now().Add(time.Second), "source", "dispatcher")).Records {
				if r.Key == "r-never-1" && r.RedriveCount == round {
					back = append(back, r.Reason)
				}
			}
			if len(back) != 1 {
				return fmt.Errorf("round %d: %d dead letters of never-1 with count %d", round, len(back), round)
			}
			return nil
		})
		run := e.redrive(t, window())
		var took []string
		for _, o := range run.Records {
			if o.Action != "skipped" {
				took = append(took, fmt.Sprintf("%s#%d:%s", o.Key, o.RedriveCount, o.Action))
			} else if o.Key == "r-never-1" && o.RedriveCount == round && o.Why != fmt.Sprintf("redrive limit reached (%d of %d)", round, maxRedrives) {
				t.Errorf("round %d: never-1 skipped for %q", round, o.Why)
			}
		}
		want := ""
		if round < maxRedrives {
			want = fmt.Sprintf("r-never-1#%d:redriven", round)
			waitStatuses(t, statuses, "never-1", repeat(notiflowv1.Status_STATUS_FAILED, round+2)...)
		}
		if strings.Join(took, ",") != want {
			t.Fatalf("round %d redrove %v, want %q", round, took, want)
		}
	}
}

func repeat(s notiflowv1.Status, n int) []notiflowv1.Status {
	out := make([]notiflowv1.Status, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func produce(t *testing.T, e *env, dues ...*notiflowv1.NotificationDue) {
	t.Helper()
	msgs := make([]kafka.Message, len(dues))
	for i, d := range dues {
		v, err := proto.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		msgs[i] = kafka.Message{Topic: e.due, Key: []byte(d.RecipientId), Value: v, Headers: kafkax.ContractHeaders("")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.writer.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
}

// resultStatuses reads the results topic and returns the statuses of
// notification id in order.
func resultStatuses(t *testing.T, brokers []string, topic, id string) []notiflowv1.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	last, err := conn.ReadLastOffset()
	conn.Close()
	if err != nil || last == 0 {
		return nil
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	var out []notiflowv1.Status
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read results: %v", err)
		}
		var ev notiflowv1.NotificationDispatched
		if err := proto.Unmarshal(m.Value, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.NotificationId == id {
			out = append(out, ev.Status)
		}
		if m.Offset >= last-1 {
			return out
		}
	}
}

// waitStatuses waits until id's results are exactly want.
func waitStatuses(t *testing.T, statuses func(string) []notiflowv1.Status, id string, want ...notiflowv1.Status) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, func() error {
		if got := statuses(id); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("%s results %v, want %v", id, got, want)
		}
		return nil
	})
}

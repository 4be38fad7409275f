package ports_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

// TestMain removes the sink binary testkit.Binary builds.
func TestMain(m *testing.M) { os.Exit(testkit.RunTests(m)) }

// sinkPkg is the sink's main package, from this package's folder.
const sinkPkg = "../../../../sink"

// realSink is a sink process of the test's own: its database, results
// topic and group, its HTTP server (the read API) at url, with the tests'
// bearer token.
type realSink struct {
	url     string
	brokers []string
	topic   string
}

func startSink(t *testing.T) *realSink {
	t.Helper()
	brokers := testkit.KafkaBrokers(t)
	s := &realSink{brokers: brokers, topic: testkit.Topic(t, brokers, 1)}
	addr := testkit.FreeAddr(t)
	s.url = "http://" + addr
	sink := testkit.StartProc(t, "sink", testkit.Binary(t, sinkPkg),
		"NOTIFLOW_HTTP_ADDR="+addr, "NOTIFLOW_MYSQL_DSN="+testkit.MySQLDSN(t), "NOTIFLOW_API_TOKEN="+token,
		"NOTIFLOW_KAFKA_BROKERS="+strings.Join(brokers, ","), "NOTIFLOW_KAFKA_PARTITIONS=1",
		"NOTIFLOW_TOPIC_DISPATCHED="+s.topic, "NOTIFLOW_TOPIC_DLQ="+testkit.Topic(t, brokers, 1),
		"NOTIFLOW_GROUP="+testkit.Group(t), "NOTIFLOW_BATCH_IDLE=20ms", "NOTIFLOW_LOG_LEVEL=warn",
	)
	testkit.Eventually(t, 60*time.Second, func() error {
		select {
		case <-sink.Done():
			t.Fatalf("the sink exited before it was ready: %v\n%s", sink.Err(), sink.Logs())
		default:
		}
		resp, err := http.Get(s.url + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return testkit.Errorf("readyz: %d", resp.StatusCode)
		}
		return nil
	})
	return s
}

// deliver produces evs to the sink's results topic (as the dispatcher
// does) and waits until the sink's API shows the last one.
func (s *realSink) deliver(t *testing.T, evs ...*notiflowv1.NotificationDispatched) {
	t.Helper()
	w := kafkax.NewWriter(s.brokers, kafkax.WriterOptions{})
	defer w.Close()
	msgs := make([]kafka.Message, 0, len(evs))
	for _, ev := range evs {
		v, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Topic: s.topic, Key: []byte(ev.RecipientId), Value: v, Headers: kafkax.ContractHeaders("")})
	}
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1].NotificationId
	testkit.Eventually(t, 30*time.Second, func() error {
		req, _ := http.NewRequest(http.MethodGet, s.url+"/v1/notifications/"+last, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return testkit.Errorf("GET notification %s: %d", last, resp.StatusCode)
		}
		return nil
	})
}

// dispatched is one result of target for recipient, dispatched at at.
func dispatched(id string, target uint64, recipient string, at time.Time, status notiflowv1.Status, attempts uint32, code int32, errText string) *notiflowv1.NotificationDispatched {
	return &notiflowv1.NotificationDispatched{
		NotificationId: id, TargetId: target, OccurrenceAtUs: at.UnixMicro(), RecipientId: recipient,
		Channel: notiflowv1.Channel_CHANNEL_WEBHOOK, TemplateId: "welcome", Status: status, Attempts: attempts,
		ProviderCode: code, Error: errText, Body: `{"hello":"world"}`,
		DueAtUs: at.Add(-time.Second).UnixMicro(), DispatchedAtUs: at.UnixMicro(),
	}
}

// seededSink is a real sink holding three results of target 4242 (to
// recipient bob): delivered, failed after 3 attempts, and rate limited;
// and one of another target to another recipient.
func seededSink(t *testing.T) *realSink {
	s := startSink(t)
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	s.deliver(t,
		dispatched("nf-test-1", 4242, "bob", at, notiflowv1.Status_STATUS_DELIVERED, 1, 200, ""),
		dispatched("nf-test-2", 4242, "bob", at.Add(time.Minute), notiflowv1.Status_STATUS_FAILED, 3, 503, "provider answered 503 three times"),
		dispatched("nf-test-3", 4242, "bob", at.Add(2*time.Minute), notiflowv1.Status_STATUS_RATE_LIMITED, 1, 429, "rate limited"),
		dispatched("nf-test-4", 7, "carol", at, notiflowv1.Status_STATUS_DELIVERED, 1, 200, ""),
	)
	return s
}

// adminGet calls the env's admin route with the token.
func adminGet(t *testing.T, e *env, path string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET %s: %d, body not JSON: %v", path, resp.StatusCode, err)
	}
	return resp.StatusCode, body
}

// closedAddr returns a loopback address nobody listens on.
func closedAddr(t *testing.T) string { return testkit.FreeAddr(t) }

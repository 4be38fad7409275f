package service

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
)

// TestMain removes the binaries testkit.Binary builds.
func TestMain(m *testing.M) { os.Exit(testkit.RunTests(m)) }

// templateCache is the dispatcher's NOTIFLOW_TEMPLATE_CACHE in the test.
const templateCache = time.Second

// TestTemplateUpdateReachesTheDispatcher runs the scheduler, a real
// dispatcher process and a real sink process on the test's own topics,
// database and Redis prefix. A managed template renders a target's
// notification (its row in the sink says version 1); once the template's
// update is acknowledged, a notification falling due NOTIFLOW_TEMPLATE_CACHE
// later is rendered with the new text, and its row says version 2.
func TestTemplateUpdateReachesTheDispatcher(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	_, base, _ := startService(t, cfg)

	kafkaEnv := []string{"NOTIFLOW_KAFKA_BROKERS=" + strings.Join(cfg.Kafka.Brokers, ","), "NOTIFLOW_KAFKA_PARTITIONS=3",
		"NOTIFLOW_TOPIC_DUE=" + cfg.Kafka.TopicDue, "NOTIFLOW_TOPIC_DISPATCHED=" + cfg.Kafka.TopicDispatched, "NOTIFLOW_TOPIC_DLQ=" + cfg.Kafka.TopicDLQ}
	dAddr := testkit.FreeAddr(t)
	d := testkit.StartProc(t, "dispatcher", testkit.Binary(t, "../../../dispatcher"), append(kafkaEnv,
		"NOTIFLOW_HTTP_ADDR="+dAddr, "NOTIFLOW_GROUP="+testkit.Group(t), "NOTIFLOW_REDIS_ADDR="+cfg.RedisAddr,
		"NOTIFLOW_REDIS_PREFIX="+cfg.RedisPrefix, "NOTIFLOW_TEMPLATE_CACHE="+templateCache.String(),
		"NOTIFLOW_COMMIT_INTERVAL=100ms", "NOTIFLOW_LOG_LEVEL=warn")...)
	sinkDSN := testkit.MySQLDSN(t)
	sAddr := testkit.FreeAddr(t)
	sk := testkit.StartProc(t, "sink", testkit.Binary(t, "../../../sink"), append(kafkaEnv,
		"NOTIFLOW_HTTP_ADDR="+sAddr, "NOTIFLOW_GROUP="+testkit.Group(t), "NOTIFLOW_MYSQL_DSN="+sinkDSN,
		"NOTIFLOW_API_TOKEN="+token, "NOTIFLOW_BATCH_IDLE=20ms", "NOTIFLOW_BATCH_MAX_AGE=50ms", "NOTIFLOW_LOG_LEVEL=warn")...)
	for name, url := range map[string]string{"scheduler": base, "dispatcher": "http://" + dAddr, "sink": "http://" + sAddr} {
		testkit.Eventually(t, 60*time.Second, func() error {
			for _, p := range []*testkit.Proc{d, sk} {
				select {
				case <-p.Done():
					t.Fatalf("%s exited: %v", p.Name, p.Err())
				default:
				}
			}
			code, body, err := get(url + "/readyz")
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("%s readyz %d %q %v", name, code, body, err)
			}
			return nil
		})
	}
	sinkDB, err := sql.Open("mysql", sinkDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sinkDB.Close() })

	call := func(method, path, body string, want int) []byte {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, want)
		}
		return b
	}
	target := func(due time.Time) int64 {
		t.Helper()
		var v struct{ ID int64 }
		b := call("POST", "/v1/targets", fmt.Sprintf(`{"recipient_id":"tpl-1","channel":"inbox","template_id":"ship","params":{"id":7},"due_at":%q}`,
			due.UTC().Format(time.RFC3339Nano)), http.StatusCreated)
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		return v.ID
	}
	row := func(targetID int64) (body, version string) {
		t.Helper()
		testkit.Eventually(t, 60*time.Second, func() error {
			err := sinkDB.QueryRow(`SELECT body, template_version FROM notifications WHERE target_id = ?`, targetID).Scan(&body, &version)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("no notification of target %d yet", targetID)
			}
			return err
		})
		return body, version
	}

	call("POST", "/v1/templates", `{"name":"ship","channel":"inbox","body":"Order {{.id}}","params":["id"]}`, http.StatusCreated)
	if body, version := row(target(time.Now())); body != "Order 7" || version != "1" {
		t.Fatalf("first notification: body %q version %q, want \"Order 7\" rendered with version 1", body, version)
	}
	call("PUT", "/v1/templates/ship", `{"channel":"inbox","subject":"Shipped","body":"Order {{.id}} is on its way","params":["id"]}`, http.StatusOK)
	acked := time.Now()
	if body, version := row(target(acked.Add(templateCache + 100*time.Millisecond))); body != "Shipped\n\nOrder 7 is on its way" || version != "2" {
		t.Fatalf("notification due %s after the update: body %q version %q, want the new text and version 2", templateCache, body, version)
	}
}

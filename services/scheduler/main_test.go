package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunTests(m)) }

// command is the scheduler binary with the test's environment less its
// NOTIFLOW_* variables, plus env.
func command(t *testing.T, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(testkit.Binary(t, "."))
	cmd.Env = testkit.ProcEnv(env...)
	return cmd
}

func TestRefusesToStartWithoutToken(t *testing.T) {
	t.Parallel()
	out, err := command(t).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("exit: %v, want status 2; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "NOTIFLOW_API_TOKEN: is required") {
		t.Fatalf("output does not name NOTIFLOW_API_TOKEN:\n%s", out)
	}
}

func TestRefusesBadSettings(t *testing.T) {
	t.Parallel()
	out, err := command(t, "NOTIFLOW_INSECURE_NO_AUTH=true", "NOTIFLOW_TICK=soon", "NOTIFLOW_CLAIM_BATCH=0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `NOTIFLOW_TICK="soon"`) {
		t.Fatalf("exit %v; output:\n%s", err, out)
	}
}

// TestProcess runs the real process against the real services: it gets
// ready, accepts a target over the API, publishes it when due, and on
// SIGTERM drains and exits 0 without logging the token.
func TestProcess(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	topic := testkit.Topic(t, brokers, 3)
	_, prefix := testkit.Redis(t)
	addr := testkit.FreeAddr(t)
	const secret = "process-test-token-XYZ"
	env := []string{
		"NOTIFLOW_HTTP_ADDR=" + addr,
		"NOTIFLOW_MYSQL_DSN=" + testkit.MySQLDSN(t),
		"NOTIFLOW_REDIS_ADDR=" + testkit.RedisAddr(t),
		"NOTIFLOW_LOCK_KEY=" + prefix + "scan",
		"NOTIFLOW_KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"NOTIFLOW_TOPIC_DUE=" + topic,
		"NOTIFLOW_TOPIC_DISPATCHED=" + topic + "-d",
		"NOTIFLOW_TOPIC_DLQ=" + topic + "-dlq",
		"NOTIFLOW_KAFKA_PARTITIONS=3",
		"NOTIFLOW_API_TOKEN=" + secret,
		"NOTIFLOW_TICK=100ms",
		"NOTIFLOW_LOG_LEVEL=debug",
	}
	t.Cleanup(func() {
		client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
		_, _ = client.DeleteTopics(context.Background(), &kafka.DeleteTopicsRequest{Topics: []string{topic + "-d", topic + "-dlq"}})
	})
	p := testkit.StartProc(t, "scheduler", testkit.Binary(t, "."), env...)
	base := "http://" + addr
	testkit.Eventually(t, 60*time.Second, func() error {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("readyz %d: %s", resp.StatusCode, b)
		}
		return nil
	})

	body := fmt.Sprintf(`{"recipient_id":"proc-1","channel":"sim","template_id":"bench","due_at":%q}`, time.Now().UTC().Format(time.RFC3339Nano))
	req, _ := http.NewRequest("POST", base+"/v1/targets", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: partitionOf(t, brokers, topic, "proc-1"), MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatalf("no notification on %s: %v\nlogs:\n%s", topic, err, p.Logs())
	}
	if string(m.Key) != "proc-1" {
		t.Fatalf("key %q", m.Key)
	}

	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(30 * time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v (want status 0 within 30s)\nlogs:\n%s", err, p.Logs())
	}
	out := p.Logs()
	if strings.Contains(out, secret) {
		t.Error("the API token appears in the logs")
	}
	for _, want := range []string{"scan lock acquired", "scheduler stopping", "scan lock released", "scheduler stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
}

// partitionOf finds the partition murmur2 puts key on (as the writer does).
func partitionOf(t *testing.T, brokers []string, topic, key string) int {
	t.Helper()
	conn, err := kafka.Dial("tcp", brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int, len(parts))
	for i := range parts {
		ids[i] = i
	}
	return (&kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: []byte(key)}, ids...)
}

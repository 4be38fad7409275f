package ports_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/scheduler/internal/dlq"
	"github.com/notiflow/notiflow/services/scheduler/internal/dlq/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/dlq/ports"
)

// TestMain removes the dispatcher binary testkit.Binary builds.
func TestMain(m *testing.M) { os.Exit(testkit.RunTests(m)) }

const token = "dlq-test-token-0123456789"

// env is one test's dead-letter admin routes: its own DLQ topic (3
// partitions), source topics and Redis prefix, served at url.
type env struct {
	url        string
	brokers    []string
	dlqTopic   string
	due        string // the dispatcher's source topic
	dispatched string // the sink's source topic
	writer     *kafka.Writer
}

func newEnv(t *testing.T, maxRedrives int) *env {
	t.Helper()
	brokers := testkit.KafkaBrokers(t)
	rdb, prefix := testkit.Redis(t)
	e := &env{brokers: brokers, dlqTopic: testkit.Topic(t, brokers, 3), due: testkit.Topic(t, brokers, 3), dispatched: testkit.Topic(t, brokers, 3)}
	return e.serve(t, rdb, prefix, maxRedrives)
}

func (e *env) serve(t *testing.T, rdb *redis.Client, prefix string, maxRedrives int) *env {
	t.Helper()
	e.writer = kafkax.NewWriter(e.brokers, kafkax.WriterOptions{})
	t.Cleanup(func() { _ = e.writer.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := dlq.NewService(e.dlqTopic, adapters.NewTopicLog(e.brokers, e.dlqTopic),
		adapters.NewMarks(rdb, prefix, e.dlqTopic, time.Hour), e.writer,
		dlq.Options{MaxRedrives: maxRedrives, RedriveMax: 1000}, log)
	mux := http.NewServeMux()
	ports.NewHandler(svc, token, log).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

// deadLetter writes msg (read from source topic at partition/offset) to
// the DLQ as service does, through kafkax.DeadLetter.
func (e *env) deadLetter(t *testing.T, service string, msg kafka.Message, reason string, attempts int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkax.NewDeadLetter(e.writer, e.dlqTopic, service).Send(ctx, msg, errors.New(reason), attempts); err != nil {
		t.Fatal(err)
	}
}

// boundary returns a time strictly after every record written so far and
// at or before every record written after it returns (Kafka timestamps
// are whole milliseconds).
func boundary(t *testing.T) time.Time {
	t.Helper()
	b := time.Now().Truncate(time.Millisecond).Add(time.Millisecond)
	testkit.Eventually(t, time.Second, func() error {
		if time.Now().Before(b) {
			return testkit.Errorf("not yet %s", b)
		}
		return nil
	})
	return b
}

// call sends method path with body (nil: none) and the bearer token
// unless noAuth, and decodes a JSON answer into out (nil: ignore).
func (e *env) call(t *testing.T, method, path string, body any, out any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := body.(string); ok {
			b = []byte(s)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
	}
	return resp.StatusCode, string(b)
}

// listResp is GET /admin/dlq's answer.
type listResp struct {
	MaxRedrives int          `json:"max_redrives"`
	Records     []dlq.Record `json:"records"`
	More        bool         `json:"more"`
}

// redriveResp is POST /admin/dlq/redrive's answer.
type redriveResp struct {
	DryRun   bool          `json:"dry_run"`
	Matched  int           `json:"matched"`
	Redriven int           `json:"redriven"`
	Skipped  int           `json:"skipped"`
	Records  []dlq.Outcome `json:"records"`
}

func (e *env) list(t *testing.T, query string) listResp {
	t.Helper()
	var out listResp
	if code, body := e.call(t, "GET", "/admin/dlq?"+query, nil, &out); code != http.StatusOK {
		t.Fatalf("GET /admin/dlq?%s: %d %s", query, code, body)
	}
	return out
}

type redriveReq struct {
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Source string    `json:"source"`
	Reason string    `json:"reason,omitempty"`
	DryRun bool      `json:"dry_run"`
}

func (e *env) redrive(t *testing.T, req redriveReq) redriveResp {
	t.Helper()
	var out redriveResp
	if code, body := e.call(t, "POST", "/admin/dlq/redrive", req, &out); code != http.StatusOK {
		t.Fatalf("POST /admin/dlq/redrive %+v: %d %s", req, code, body)
	}
	return out
}

// readAll reads every record of topic's partitions until n are read.
func readN(t *testing.T, brokers []string, topic string, partitions, n int) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []kafka.Message
	for p := range partitions {
		conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, p)
		if err != nil {
			t.Fatal(err)
		}
		last, err := conn.ReadLastOffset()
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		if last == 0 {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p, MaxWait: 100 * time.Millisecond})
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				r.Close()
				t.Fatalf("read %s/%d: %v", topic, p, err)
			}
			out = append(out, m)
			if m.Offset == last-1 {
				break
			}
		}
		r.Close()
	}
	if len(out) != n {
		t.Fatalf("%s holds %d records, want %d", topic, len(out), n)
	}
	return out
}

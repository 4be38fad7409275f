package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	libconfig "github.com/notiflow/notiflow/lib/config"
	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/scheduler/internal/config"
)

const token = "service-test-token"

// testConfig is a validated scheduler configuration on the test's own
// database, Redis prefix and topics.
func testConfig(t *testing.T) config.Config {
	t.Helper()
	brokers := testkit.KafkaBrokers(t)
	_, prefix := testkit.Redis(t)
	var cfg config.Config
	if err := libconfig.LoadFrom(func(string) (string, bool) { return "", false }, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg.APIToken = token
	cfg.MySQLDSN = testkit.MySQLDSN(t)
	cfg.RedisAddr = testkit.RedisAddr(t)
	cfg.RedisPrefix = prefix
	cfg.LockKey = prefix + "scan"
	cfg.Tick = 100 * time.Millisecond
	cfg.Kafka.Brokers = brokers
	cfg.Kafka.Partitions = 3
	cfg.Kafka.TopicDue = testkit.Topic(t, brokers, 3)
	cfg.Kafka.TopicDispatched = testkit.Topic(t, brokers, 3)
	cfg.Kafka.TopicDLQ = testkit.Topic(t, brokers, 1)
	cfg.ShutdownTimeout = 10 * time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func get(url string) (int, string, error) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestRunServesTheAPIAndStopsCleanly: the service gets ready, its Handler
// serves the targets API behind the token, and Run returns nil once ctx
// ends, after which readiness is false.
func TestRunServesTheAPIAndStopsCleanly(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s, base, run := startService(t, cfg)
	testkit.Eventually(t, 30*time.Second, func() error {
		code, body, err := get(base + "/readyz")
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("readyz %d %q %v", code, body, err)
		}
		return nil
	})

	body := fmt.Sprintf(`{"recipient_id":"svc-1","channel":"sim","template_id":"bench","due_at":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
	for _, tt := range []struct {
		name, auth string
		want       int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"token", "Bearer " + token, http.StatusCreated},
	} {
		req, _ := http.NewRequest("POST", base+"/v1/targets", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Fatalf("%s: create %d %s, want %d", tt.name, resp.StatusCode, b, tt.want)
		}
	}

	if err := run.Stop(); err != nil {
		t.Fatalf("Run after ctx ended: %v, want nil", err)
	}
	if err := s.Ready(context.Background()); err == nil {
		t.Fatal("ready after Run returned, want not ready (draining)")
	}
	if _, _, err := get(base + "/healthz"); err == nil {
		t.Fatal("HTTP still served after Run returned")
	}
}

// TestNewNamesARefusedTopic: a topic Kafka refuses (more replicas than
// brokers) fails New at once, naming the topic, instead of waiting.
func TestNewNamesARefusedTopic(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Kafka.TopicDispatched = testkit.ID("refused")
	cfg.Kafka.ReplicationFactor = 99
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	_, err := New(ctx, cfg, slog.New(slog.DiscardHandler), nil)
	var te *kafkax.TopicError
	if !errors.As(err, &te) || te.Topic != cfg.Kafka.TopicDispatched {
		t.Fatalf("New: %v, want a *kafkax.TopicError naming %s", err, cfg.Kafka.TopicDispatched)
	}
	if ctx.Err() != nil {
		t.Fatal("New waited until the deadline instead of failing at once")
	}
}

// startService builds the service of cfg and runs it on a loopback port of
// its own until the test ends; it returns the service, its base URL and
// the background run.
func startService(t *testing.T, cfg config.Config) (*Service, string, *testkit.Background) {
	t.Helper()
	s, err := New(t.Context(), cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	run := testkit.Go(t, func(ctx context.Context) error { return s.Run(ctx, ln) })
	return s, "http://" + ln.Addr().String(), run
}

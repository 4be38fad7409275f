package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	libconfig "github.com/notiflow/notiflow/lib/config"
	"github.com/notiflow/notiflow/lib/consume"
	"github.com/notiflow/notiflow/services/dispatcher/internal/domain"
)

// load fills a Config from env alone (not the process environment).
func load(env map[string]string) (Config, error) {
	return libconfig.LoadAs[Config](libconfig.MapLookup(env))
}

func TestDefaultsAreValid(t *testing.T) {
	t.Parallel()
	c, err := load(nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	want := Config{
		HTTPAddr: ":8081", LogLevel: "info", ShutdownTimeout: 20 * time.Second, DrainTimeout: 15 * time.Second, GCPercent: 300,
		Group: "notiflow-dispatcher", Ordering: "key", Workers: 512, MaxInFlight: 10000, MaxInFlightPerPartition: 2000,
		CommitInterval: 200 * time.Millisecond, ResultLinger: 10 * time.Millisecond,
		RedisAddr: "127.0.0.1:6379", RedisPrefix: "notiflow:", RedisTimeout: 2 * time.Second, RedisBatch: 256, RedisPipelines: 2,
		InflightTTL: 15 * time.Second, DedupTTL: 7 * 24 * time.Hour, RateWindow: time.Minute, RateLimitPolicy: "defer", TemplateCache: 5 * time.Second,
		WebhookTimeout: 5 * time.Second, WebhookMaxElapsed: 2 * time.Minute, WebhookBackoffMin: 200 * time.Millisecond,
		WebhookBackoffMax: 10 * time.Second, WebhookMaxConnsPerHost: 64, WebhookSecretCache: 10 * time.Second, BreakerFailures: 5, BreakerCooldown: 10 * time.Second,
		SimLatency: 2 * time.Millisecond,
		HTTP:       c.HTTP, Kafka: c.Kafka, // lib/obs and lib/kafkax test their own
	}
	if !reflect.DeepEqual(c, want) || c.RatePolicy() != domain.RateDefer || c.OrderingMode() != consume.OrderKey {
		t.Fatalf("defaults:\n got %+v\nwant %+v", c, want)
	}
}

// TestConsumerDefaultsAreTheLibrarys pins the consumer settings whose
// default is lib/consume's own: the tag states it for -print-config and the
// deployment files, lib/consume keeps the zero-value default for its other
// callers, and the two must not drift apart.
func TestConsumerDefaultsAreTheLibrarys(t *testing.T) {
	t.Parallel()
	c, err := load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxInFlight != consume.DefaultMaxInFlight || c.MaxInFlightPerPartition != consume.DefaultMaxInFlightPerPartition ||
		c.CommitInterval != consume.DefaultCommitInterval {
		t.Errorf("NOTIFLOW_MAX_IN_FLIGHT=%d NOTIFLOW_MAX_IN_FLIGHT_PER_PARTITION=%d NOTIFLOW_COMMIT_INTERVAL=%s, lib/consume defaults %d %d %s",
			c.MaxInFlight, c.MaxInFlightPerPartition, c.CommitInterval,
			consume.DefaultMaxInFlight, consume.DefaultMaxInFlightPerPartition, consume.DefaultCommitInterval)
	}
}

func TestValidateNamesTheVariable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give map[string]string
		want string
	}{
		{map[string]string{"NOTIFLOW_ORDERING": "random"}, "NOTIFLOW_ORDERING"},
		{map[string]string{"NOTIFLOW_WORKERS": "0"}, "NOTIFLOW_WORKERS"},
		{map[string]string{"NOTIFLOW_DRAIN_TIMEOUT": "25s"}, "NOTIFLOW_DRAIN_TIMEOUT"},
		{map[string]string{"NOTIFLOW_DRAIN_TIMEOUT": "40s", "NOTIFLOW_SHUTDOWN_TIMEOUT": "60s"}, "rebalance timeout"},
		// A drain must end, and the member rejoin, within the rebalance
		// timeout (30s) less a heartbeat interval and the drain margin.
		{map[string]string{"NOTIFLOW_DRAIN_TIMEOUT": "27s", "NOTIFLOW_SHUTDOWN_TIMEOUT": "60s"}, "NOTIFLOW_DRAIN_TIMEOUT"},
		{map[string]string{"NOTIFLOW_INFLIGHT_TTL": "10ms"}, "NOTIFLOW_INFLIGHT_TTL"},
		{map[string]string{"NOTIFLOW_RATE_LIMIT": "-1"}, "NOTIFLOW_RATE_LIMIT"},
		{map[string]string{"NOTIFLOW_RATE_LIMIT_POLICY": "queue"}, "NOTIFLOW_RATE_LIMIT_POLICY"},
		{map[string]string{"NOTIFLOW_WEBHOOK_ALLOW": "10.0.0.0/33"}, "NOTIFLOW_WEBHOOK_ALLOW"},
		{map[string]string{"NOTIFLOW_WEBHOOK_ALLOW": "bad host!"}, "NOTIFLOW_WEBHOOK_ALLOW"},
		{map[string]string{"NOTIFLOW_TEMPLATE_CACHE": "-1s"}, "NOTIFLOW_TEMPLATE_CACHE"},
		{map[string]string{"NOTIFLOW_WEBHOOK_MAX_ELAPSED": "1s"}, "NOTIFLOW_WEBHOOK_MAX_ELAPSED"},
		{map[string]string{"NOTIFLOW_SIM_FAILURE_RATE": "1.5"}, "NOTIFLOW_SIM_FAILURE_RATE"},
		{map[string]string{"NOTIFLOW_REDIS_ADDR": "nohostport"}, "NOTIFLOW_REDIS_ADDR"},
		{map[string]string{"NOTIFLOW_BREAKER_FAILURES": "0"}, "NOTIFLOW_BREAKER_FAILURES"},
		{map[string]string{"NOTIFLOW_KAFKA_BROKERS": ","}, "NOTIFLOW_KAFKA_BROKERS"},
		{map[string]string{"NOTIFLOW_GC_PERCENT": "-5"}, "NOTIFLOW_GC_PERCENT"},
		{map[string]string{"NOTIFLOW_RESULT_LINGER": "0s"}, "NOTIFLOW_RESULT_LINGER"},
		{map[string]string{"NOTIFLOW_RESULT_LINGER": "999us"}, "NOTIFLOW_RESULT_LINGER"},
		{map[string]string{"NOTIFLOW_RESULT_LINGER": "1001ms"}, "NOTIFLOW_RESULT_LINGER"},
		{map[string]string{"NOTIFLOW_WEBHOOK_SIGNING_SECRET": "whsec_dG9vIHNob3J0"}, "NOTIFLOW_WEBHOOK_SIGNING_SECRET: entry 1"},
		{map[string]string{"NOTIFLOW_WEBHOOK_SECRET_CACHE": "1h"}, "NOTIFLOW_WEBHOOK_SECRET_CACHE"},
	}
	for _, tt := range tests {
		c, err := load(tt.give)
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want one naming %s", tt.give, err, tt.want)
		}
	}
}

// TestResultLingerBounds: the limits themselves are accepted.
func TestResultLingerBounds(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"1ms", "1s"} {
		c, err := load(map[string]string{"NOTIFLOW_RESULT_LINGER": v})
		if err == nil {
			err = c.Validate()
		}
		if err != nil {
			t.Errorf("NOTIFLOW_RESULT_LINGER=%s: %v", v, err)
		}
	}
}

func TestLoadRejectsUnparseableValues(t *testing.T) {
	t.Parallel()
	_, err := load(map[string]string{"NOTIFLOW_INFLIGHT_TTL": "soon", "NOTIFLOW_WORKERS": "many"})
	if err == nil || !strings.Contains(err.Error(), "NOTIFLOW_INFLIGHT_TTL") || !strings.Contains(err.Error(), "NOTIFLOW_WORKERS") {
		t.Fatalf("error %v, want both variables named", err)
	}
}

func TestVarsAndOverrides(t *testing.T) {
	t.Parallel()
	vars := strings.Join(libconfig.Vars(&Config{}), " ")
	for _, v := range []string{"NOTIFLOW_GROUP", "NOTIFLOW_WORKERS", "NOTIFLOW_RATE_LIMIT", "NOTIFLOW_TEMPLATES_FILE", "NOTIFLOW_WEBHOOK_ALLOW", "NOTIFLOW_TOPIC_DUE"} {
		if !strings.Contains(vars, v) {
			t.Errorf("Vars lacks %s", v)
		}
	}
	c, err := load(map[string]string{"NOTIFLOW_WEBHOOK_ALLOW": "127.0.0.1/32, hooks.internal", "NOTIFLOW_RATE_WINDOW": "30s", "NOTIFLOW_ORDERING": "partition"})
	if err != nil || c.Validate() != nil {
		t.Fatalf("load: %v / %v", err, c.Validate())
	}
	if len(c.WebhookAllow) != 2 || c.WebhookAllow[1] != "hooks.internal" || c.RateWindow != 30*time.Second || c.OrderingMode().String() != "partition" {
		t.Fatalf("overrides not applied: %+v", c)
	}
	if strings.Contains((Config{RedisPassword: "s3cret"}).LogValue().String(), "s3cret") {
		t.Fatal("LogValue shows the Redis password")
	}
	var buf strings.Builder
	if err := libconfig.Print(&buf, Config{RedisPassword: "s3cret"}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "s3cret") || !strings.Contains(buf.String(), "NOTIFLOW_REDIS_PASSWORD=redacted\n") {
		t.Fatalf("-print-config shows:\n%s", buf.String())
	}
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw/Lh1pBC7dsE="
	c, err = load(map[string]string{"NOTIFLOW_WEBHOOK_SIGNING_SECRET": secret + ",whsec_bm90LWEtdmFsaWQta2V5"})
	if err != nil || len(c.WebhookSigningSecrets) != 2 {
		t.Fatalf("load signing secrets: %v, %d", err, len(c.WebhookSigningSecrets))
	}
	if err := c.Validate(); err == nil || strings.Contains(err.Error(), "bm90LWEtdmFsaWQta2V5") || strings.Contains(err.Error(), secret) {
		t.Errorf("Validate of a bad second secret: %v; want an error without the secrets", err)
	}
	if strings.Contains(c.LogValue().String(), secret[6:]) {
		t.Fatal("LogValue shows a webhook signing secret")
	}
	buf.Reset()
	if err := libconfig.Print(&buf, c); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), secret[6:]) || !strings.Contains(buf.String(), "NOTIFLOW_WEBHOOK_SIGNING_SECRET=redacted\n") {
		t.Fatalf("-print-config shows the webhook signing secret:\n%s", buf.String())
	}
}

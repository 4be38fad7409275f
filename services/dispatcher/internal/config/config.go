// Package config is the dispatcher's configuration: every NOTIFLOW_*
// variable it reads, with its default, and the checks that stop the process
// at start when a value cannot work.
package config

import (
	"errors"
	"log/slog"
	"net"
	"time"

	libconfig "github.com/notiflow/notiflow/lib/config"
	"github.com/notiflow/notiflow/lib/consume"
	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/netguard"
	"github.com/notiflow/notiflow/lib/obs"
	"github.com/notiflow/notiflow/lib/webhooksig"
	"github.com/notiflow/notiflow/services/dispatcher/internal/domain"
)

// Config is the dispatcher's configuration. Load it with lib/config
// (lib/svc's svc.Program in main), which validates it.
type Config struct {
	HTTPAddr        string        `env:"NOTIFLOW_HTTP_ADDR" default:":8081"`
	LogLevel        string        `env:"NOTIFLOW_LOG_LEVEL" default:"info"`
	ShutdownTimeout time.Duration `env:"NOTIFLOW_SHUTDOWN_TIMEOUT" default:"20s"`
	// DrainTimeout bounds how long running records may take to finish at a
	// rebalance or shutdown; below ShutdownTimeout and at most
	// consume.MaxDrainTimeout of the group's heartbeat interval and
	// rebalance timeout. It may exceed the session timeout (see lib/consume).
	DrainTimeout time.Duration `env:"NOTIFLOW_DRAIN_TIMEOUT" default:"15s"`
	// Pprof serves /debug/pprof/ on the HTTP address (off by default).
	Pprof bool `env:"NOTIFLOW_PPROF" default:"false"`
	// GCPercent is the Go GC target (as GOGC) applied at start unless the
	// GOGC variable is set; 0 keeps Go's default. 300 trades about twice
	// the heap (~70 MiB at 20k records/s) for ~10% less CPU.
	GCPercent int `env:"NOTIFLOW_GC_PERCENT" default:"300"`

	// Consumer runtime.
	Group                   string        `env:"NOTIFLOW_GROUP" default:"notiflow-dispatcher"`
	Ordering                string        `env:"NOTIFLOW_ORDERING" default:"key"`
	Workers                 int           `env:"NOTIFLOW_WORKERS" default:"512"`
	MaxInFlight             int           `env:"NOTIFLOW_MAX_IN_FLIGHT" default:"10000"`
	MaxInFlightPerPartition int           `env:"NOTIFLOW_MAX_IN_FLIGHT_PER_PARTITION" default:"2000"`
	CommitInterval          time.Duration `env:"NOTIFLOW_COMMIT_INTERVAL" default:"200ms"`
	// ResultLinger is how long the dispatcher's Kafka writer, which
	// produces the results and the dead letters, holds a partition's batch
	// open for more records (kafka-go's BatchTimeout): longer means fewer,
	// larger produce requests, which cost Kafka and the dispatcher less per
	// result, and each publish waits up to that much longer.
	ResultLinger time.Duration `env:"NOTIFLOW_RESULT_LINGER" default:"10ms"`

	// Redis: dedup markers, rate-limit counters, simulated-send counts.
	RedisAddr     string `env:"NOTIFLOW_REDIS_ADDR" default:"127.0.0.1:6379"`
	RedisPassword string `env:"NOTIFLOW_REDIS_PASSWORD" secret:"true"`
	// RedisPrefix starts every key the dispatcher writes.
	RedisPrefix  string        `env:"NOTIFLOW_REDIS_PREFIX" default:"notiflow:"`
	RedisTimeout time.Duration `env:"NOTIFLOW_REDIS_TIMEOUT" default:"2s"`
	// RedisBatch is the most commands in one pipeline; RedisPipelines how
	// many pipelines may be in flight at once.
	RedisBatch     int `env:"NOTIFLOW_REDIS_BATCH" default:"256"`
	RedisPipelines int `env:"NOTIFLOW_REDIS_PIPELINES" default:"2"`

	// InflightTTL is the life of an in-flight claim (renewed while a send
	// runs); DedupTTL how long a finished notification is remembered.
	InflightTTL time.Duration `env:"NOTIFLOW_INFLIGHT_TTL" default:"15s"`
	DedupTTL    time.Duration `env:"NOTIFLOW_DEDUP_TTL" default:"168h"`

	// RateLimit is the most notifications per recipient per RateWindow;
	// 0 turns rate limiting off.
	RateLimit  int           `env:"NOTIFLOW_RATE_LIMIT" default:"0"`
	RateWindow time.Duration `env:"NOTIFLOW_RATE_WINDOW" default:"1m"`
	// RateLimitPolicy is what happens to a notification over the limit:
	// "defer" sends it once the recipient's window allows, "drop" records
	// it RATE_LIMITED and never sends it (see the README for the choice of
	// default).
	RateLimitPolicy string `env:"NOTIFLOW_RATE_LIMIT_POLICY" default:"defer"`

	// TemplatesFile is a JSON object {"template id": "text/template text"}
	// adding to or overriding the built-in templates.
	TemplatesFile string `env:"NOTIFLOW_TEMPLATES_FILE"`
	// TemplateCache is how long a managed template (or its absence) read
	// from Redis is reused: a template created, updated or deleted through
	// the scheduler's API is seen within this bound of reaching Redis.
	TemplateCache time.Duration `env:"NOTIFLOW_TEMPLATE_CACHE" default:"5s"`

	WebhookTimeout    time.Duration `env:"NOTIFLOW_WEBHOOK_TIMEOUT" default:"5s"`
	WebhookMaxElapsed time.Duration `env:"NOTIFLOW_WEBHOOK_MAX_ELAPSED" default:"2m"`
	WebhookBackoffMin time.Duration `env:"NOTIFLOW_WEBHOOK_BACKOFF_MIN" default:"200ms"`
	WebhookBackoffMax time.Duration `env:"NOTIFLOW_WEBHOOK_BACKOFF_MAX" default:"10s"`
	// WebhookAllow lists CIDRs and host names that may be called although
	// they are loopback, private, link-local, ... addresses.
	WebhookAllow           []string `env:"NOTIFLOW_WEBHOOK_ALLOW"`
	WebhookMaxConnsPerHost int      `env:"NOTIFLOW_WEBHOOK_MAX_CONNS_PER_HOST" default:"64"`
	// WebhookSigningSecrets (whsec_..., comma-separated: all are used to
	// sign, for their own rotation) sign the webhooks of targets without a
	// secret of their own. Secret: never logged.
	WebhookSigningSecrets []string `env:"NOTIFLOW_WEBHOOK_SIGNING_SECRET" secret:"true"`
	// WebhookSecretCache is how long a target's secrets read from Redis are
	// reused: a rotation takes effect within it (0: read on every attempt).
	WebhookSecretCache time.Duration `env:"NOTIFLOW_WEBHOOK_SECRET_CACHE" default:"10s"`
	BreakerFailures    int           `env:"NOTIFLOW_BREAKER_FAILURES" default:"5"`
	BreakerCooldown    time.Duration `env:"NOTIFLOW_BREAKER_COOLDOWN" default:"10s"`

	SimLatency     time.Duration `env:"NOTIFLOW_SIM_LATENCY" default:"2ms"`
	SimFailureRate float64       `env:"NOTIFLOW_SIM_FAILURE_RATE" default:"0"`

	HTTP  obs.ServerConfig
	Kafka kafkax.Config
}

// Validate returns every setting that cannot work, each error naming its
// variable.
func (c Config) Validate() error {
	var errs []error
	add := func(name, format string, args ...any) {
		errs = append(errs, libconfig.Errorf(name, format, args...))
	}
	if c.HTTPAddr == "" {
		add("NOTIFLOW_HTTP_ADDR", "must not be empty")
	}
	if c.ShutdownTimeout < 2*time.Second {
		add("NOTIFLOW_SHUTDOWN_TIMEOUT", "must be at least 2s, got %s", c.ShutdownTimeout)
	}
	switch {
	case c.DrainTimeout < 100*time.Millisecond:
		add("NOTIFLOW_DRAIN_TIMEOUT", "must be at least 100ms, got %s", c.DrainTimeout)
	case c.DrainTimeout >= c.ShutdownTimeout:
		add("NOTIFLOW_DRAIN_TIMEOUT", "must be below NOTIFLOW_SHUTDOWN_TIMEOUT (%s), got %s", c.ShutdownTimeout, c.DrainTimeout)
	case c.DrainTimeout > consume.MaxDrainTimeout(consume.DefaultHeartbeatInterval, consume.DefaultRebalanceTimeout):
		add("NOTIFLOW_DRAIN_TIMEOUT", "must be at most %s (the rebalance timeout %s less a heartbeat interval and the drain margin %s), got %s",
			consume.MaxDrainTimeout(consume.DefaultHeartbeatInterval, consume.DefaultRebalanceTimeout),
			consume.DefaultRebalanceTimeout, consume.DrainMargin, c.DrainTimeout)
	}
	if c.GCPercent < 0 || c.GCPercent > 10000 {
		add("NOTIFLOW_GC_PERCENT", "must be between 0 and 10000, got %d", c.GCPercent)
	}
	if c.Group == "" {
		add("NOTIFLOW_GROUP", "must not be empty")
	}
	if _, err := consume.ParseOrdering(c.Ordering); err != nil {
		add("NOTIFLOW_ORDERING", "%v", err)
	}
	if c.Workers < 1 || c.Workers > 10000 {
		add("NOTIFLOW_WORKERS", "must be between 1 and 10000, got %d", c.Workers)
	}
	if c.MaxInFlight < 1 {
		add("NOTIFLOW_MAX_IN_FLIGHT", "must be at least 1, got %d", c.MaxInFlight)
	}
	if c.MaxInFlightPerPartition < 1 {
		add("NOTIFLOW_MAX_IN_FLIGHT_PER_PARTITION", "must be at least 1, got %d", c.MaxInFlightPerPartition)
	}
	if c.CommitInterval < 10*time.Millisecond {
		add("NOTIFLOW_COMMIT_INTERVAL", "must be at least 10ms, got %s", c.CommitInterval)
	}
	if c.ResultLinger < time.Millisecond || c.ResultLinger > time.Second {
		add("NOTIFLOW_RESULT_LINGER", "must be between 1ms and 1s, got %s", c.ResultLinger)
	}
	if c.RedisAddr == "" {
		add("NOTIFLOW_REDIS_ADDR", "must not be empty")
	} else if _, _, err := net.SplitHostPort(c.RedisAddr); err != nil {
		add("NOTIFLOW_REDIS_ADDR", "want host:port: %v", err)
	}
	if c.RedisTimeout < 10*time.Millisecond {
		add("NOTIFLOW_REDIS_TIMEOUT", "must be at least 10ms, got %s", c.RedisTimeout)
	}
	if c.RedisBatch < 1 || c.RedisBatch > 10000 {
		add("NOTIFLOW_REDIS_BATCH", "must be between 1 and 10000, got %d", c.RedisBatch)
	}
	if c.RedisPipelines < 1 || c.RedisPipelines > 64 {
		add("NOTIFLOW_REDIS_PIPELINES", "must be between 1 and 64, got %d", c.RedisPipelines)
	}
	if c.InflightTTL < time.Second {
		add("NOTIFLOW_INFLIGHT_TTL", "must be at least 1s, got %s", c.InflightTTL)
	}
	if c.DedupTTL < time.Minute {
		add("NOTIFLOW_DEDUP_TTL", "must be at least 1m, got %s", c.DedupTTL)
	}
	if c.RateLimit < 0 {
		add("NOTIFLOW_RATE_LIMIT", "must not be negative, got %d", c.RateLimit)
	}
	if c.RateLimit > 0 && c.RateWindow < time.Millisecond {
		add("NOTIFLOW_RATE_WINDOW", "must be at least 1ms when NOTIFLOW_RATE_LIMIT is set, got %s", c.RateWindow)
	}
	if _, err := domain.ParseRatePolicy(c.RateLimitPolicy); err != nil {
		add("NOTIFLOW_RATE_LIMIT_POLICY", "%v", err)
	}
	if c.WebhookTimeout < 10*time.Millisecond {
		add("NOTIFLOW_WEBHOOK_TIMEOUT", "must be at least 10ms, got %s", c.WebhookTimeout)
	}
	if c.WebhookMaxElapsed < c.WebhookTimeout {
		add("NOTIFLOW_WEBHOOK_MAX_ELAPSED", "must be at least NOTIFLOW_WEBHOOK_TIMEOUT (%s), got %s", c.WebhookTimeout, c.WebhookMaxElapsed)
	}
	if c.WebhookBackoffMin < time.Millisecond || c.WebhookBackoffMax < c.WebhookBackoffMin {
		add("NOTIFLOW_WEBHOOK_BACKOFF_MIN", "must be at least 1ms and not above NOTIFLOW_WEBHOOK_BACKOFF_MAX, got %s and %s", c.WebhookBackoffMin, c.WebhookBackoffMax)
	}
	if c.TemplateCache < 0 || c.TemplateCache > 5*time.Minute {
		add("NOTIFLOW_TEMPLATE_CACHE", "must be between 0s and 5m, got %s", c.TemplateCache)
	}
	for _, a := range c.WebhookAllow {
		if !netguard.ValidAllowEntry(a) {
			add("NOTIFLOW_WEBHOOK_ALLOW", "%q is neither a CIDR (10.1.0.0/16), an IP address nor a host name", a)
		}
	}
	for i, sec := range c.WebhookSigningSecrets {
		if _, err := webhooksig.Decode(sec); err != nil {
			add("NOTIFLOW_WEBHOOK_SIGNING_SECRET", "entry %d: %v", i+1, err)
		}
	}
	if c.WebhookSecretCache < 0 || c.WebhookSecretCache > 5*time.Minute {
		add("NOTIFLOW_WEBHOOK_SECRET_CACHE", "must be between 0 and 5m, got %s", c.WebhookSecretCache)
	}
	if c.WebhookMaxConnsPerHost < 1 {
		add("NOTIFLOW_WEBHOOK_MAX_CONNS_PER_HOST", "must be at least 1, got %d", c.WebhookMaxConnsPerHost)
	}
	if c.BreakerFailures < 1 {
		add("NOTIFLOW_BREAKER_FAILURES", "must be at least 1, got %d", c.BreakerFailures)
	}
	if c.BreakerCooldown < 10*time.Millisecond {
		add("NOTIFLOW_BREAKER_COOLDOWN", "must be at least 10ms, got %s", c.BreakerCooldown)
	}
	if c.SimLatency < 0 {
		add("NOTIFLOW_SIM_LATENCY", "must not be negative, got %s", c.SimLatency)
	}
	if c.SimFailureRate < 0 || c.SimFailureRate > 1 {
		add("NOTIFLOW_SIM_FAILURE_RATE", "must be between 0 and 1, got %g", c.SimFailureRate)
	}
	if err := c.HTTP.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Kafka.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// OrderingMode is the parsed NOTIFLOW_ORDERING (call after Validate).
func (c Config) OrderingMode() consume.Ordering {
	o, _ := consume.ParseOrdering(c.Ordering)
	return o
}

// RatePolicy is the parsed NOTIFLOW_RATE_LIMIT_POLICY (call after Validate).
func (c Config) RatePolicy() domain.RatePolicy {
	p, _ := domain.ParseRatePolicy(c.RateLimitPolicy)
	return p
}

// LogValue is what a log line shows of c: every variable as -print-config
// prints it, secrets redacted (lib/config's LogValue).
func (c Config) LogValue() slog.Value { return libconfig.LogValue(c) }

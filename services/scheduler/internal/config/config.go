// Package config is the scheduler's configuration: every NOTIFLOW_*
// variable it reads, with its default, and the checks that stop the process
// at start when a value cannot work.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	libconfig "github.com/notiflow/notiflow/lib/config"
	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/netguard"
	"github.com/notiflow/notiflow/lib/obs"
	"github.com/notiflow/notiflow/services/scheduler/internal/adapters"
)

// Config is the scheduler's configuration. Load it with lib/config
// (lib/svc's svc.Program in main), which validates it.
type Config struct {
	HTTPAddr      string `env:"NOTIFLOW_HTTP_ADDR" default:":8080"`
	MySQLDSN      string `env:"NOTIFLOW_MYSQL_DSN" secret:"dsn" default:"notiflow:notiflow@tcp(127.0.0.1:3306)/notiflow?parseTime=true&loc=UTC"`
	MySQLMaxConns int    `env:"NOTIFLOW_MYSQL_MAX_CONNS" default:"16"`
	RedisAddr     string `env:"NOTIFLOW_REDIS_ADDR" default:"127.0.0.1:6379"`
	RedisPassword string `env:"NOTIFLOW_REDIS_PASSWORD" secret:"true"`
	// APIToken is the bearer token of the HTTP API. Secret: never logged.
	APIToken       string `env:"NOTIFLOW_API_TOKEN" secret:"true"`
	InsecureNoAuth bool   `env:"NOTIFLOW_INSECURE_NO_AUTH" default:"false"`
	LogLevel       string `env:"NOTIFLOW_LOG_LEVEL" default:"info"`
	// Pprof serves /debug/pprof/ on the HTTP address behind the API's
	// bearer token (off by default).
	Pprof bool `env:"NOTIFLOW_PPROF" default:"false"`
	// GCPercent is the Go GC target (as GOGC) applied at start unless GOGC
	// is set; 0 keeps Go's default. 400: claims and relay passes allocate
	// per row but keep little alive (bench/README.md, scheduler).
	GCPercent int `env:"NOTIFLOW_GC_PERCENT" default:"400"`

	ScanEnabled     bool          `env:"NOTIFLOW_SCAN_ENABLED" default:"true"`
	Tick            time.Duration `env:"NOTIFLOW_TICK" default:"1s"`
	ClaimBatch      int           `env:"NOTIFLOW_CLAIM_BATCH" default:"5000"`
	RelayBatch      int           `env:"NOTIFLOW_RELAY_BATCH" default:"5000"`
	LockKey         string        `env:"NOTIFLOW_LOCK_KEY" default:"notiflow:scheduler:scan"`
	LockTTL         time.Duration `env:"NOTIFLOW_LOCK_TTL" default:"10s"`
	CollapseMissed  bool          `env:"NOTIFLOW_COLLAPSE_MISSED" default:"true"`
	MaxCatchUp      int           `env:"NOTIFLOW_MAX_CATCHUP" default:"100"`
	OutboxRetention time.Duration `env:"NOTIFLOW_OUTBOX_RETENTION" default:"1h"`

	BulkMax          int   `env:"NOTIFLOW_BULK_MAX" default:"10000"`
	MaxParamsBytes   int   `env:"NOTIFLOW_MAX_PARAMS_BYTES" default:"16384"`
	MaxBulkBodyBytes int64 `env:"NOTIFLOW_MAX_BULK_BODY_BYTES" default:"33554432"`

	ShutdownTimeout time.Duration `env:"NOTIFLOW_SHUTDOWN_TIMEOUT" default:"20s"`

	// Benchmark runs (POST /admin/benchmarks). The scheduler observes the
	// other services' progress through their Redis prefix and consumer
	// groups; these must match the dispatcher's NOTIFLOW_REDIS_PREFIX and
	// NOTIFLOW_GROUP and the sink's NOTIFLOW_GROUP.
	RedisPrefix           string        `env:"NOTIFLOW_REDIS_PREFIX" default:"notiflow:"`
	DispatcherGroup       string        `env:"NOTIFLOW_DISPATCHER_GROUP" default:"notiflow-dispatcher"`
	SinkGroup             string        `env:"NOTIFLOW_SINK_GROUP" default:"notiflow-sink"`
	BenchLead             time.Duration `env:"NOTIFLOW_BENCH_LEAD" default:"5s"`
	BenchStall            time.Duration `env:"NOTIFLOW_BENCH_STALL" default:"60s"`
	BenchSample           time.Duration `env:"NOTIFLOW_BENCH_SAMPLE" default:"250ms"`
	BenchMaxNotifications int           `env:"NOTIFLOW_BENCH_MAX_NOTIFICATIONS" default:"1000000"`

	// SinkAPIURL is the sink's HTTP base URL (http://sink:8082), where the
	// admin page's notifications panel reads through the scheduler. Empty:
	// the panel says the sink API is not configured.
	SinkAPIURL string `env:"NOTIFLOW_SINK_API_URL"`

	// Webhook signing secrets (app.WebhookSecrets): a rotated-out secret
	// stays valid for WebhookSecretGrace; the Redis copy the dispatcher
	// reads (under RedisPrefix) is checked and refreshed every
	// WebhookSecretSync.
	WebhookSecretGrace time.Duration `env:"NOTIFLOW_WEBHOOK_SECRET_GRACE" default:"24h"`
	WebhookSecretSync  time.Duration `env:"NOTIFLOW_WEBHOOK_SECRET_SYNC" default:"10s"`

	// Fences (app.Fences): a change of a target (PATCH, pause, resume,
	// delete) waits at most FenceWait for the sends of the target in
	// progress before it answers 503; the Redis copy of the fences the
	// dispatcher checks (under RedisPrefix) is checked and refreshed every
	// FenceSync (a missing copy stops every send until it is back). The
	// default wait is above the dispatcher's default webhook attempt
	// timeout (NOTIFLOW_WEBHOOK_TIMEOUT, 5s), so that a change waits out an
	// attempt in progress instead of answering 503.
	FenceWait time.Duration `env:"NOTIFLOW_FENCE_WAIT" default:"8s"`
	FenceSync time.Duration `env:"NOTIFLOW_FENCE_SYNC" default:"1s"`

	// Dead-letter redrive (POST /admin/dlq/redrive): a dead letter whose
	// redrive count has reached DLQMaxRedrives is skipped; one call
	// redrives at most DLQRedriveMax records; a redriven dead letter is
	// marked in Redis (under RedisPrefix) for DLQRedriveMarkTTL, so a
	// second redrive of the same window skips it.
	// WebhookAllow is the dispatcher's NOTIFLOW_WEBHOOK_ALLOW, read here
	// too: a target's webhook_url is refused at creation when its host is
	// (or resolves only to) an address the dispatcher would refuse to dial
	// (lib/netguard).
	WebhookAllow []string `env:"NOTIFLOW_WEBHOOK_ALLOW"`

	// TemplatesFile is the dispatchers' NOTIFLOW_TEMPLATES_FILE, read here
	// too so that targets may name its templates (and managed templates
	// may not take their names). TemplateSync is how often every managed
	// template is copied to Redis (under RedisPrefix) again.
	TemplatesFile string        `env:"NOTIFLOW_TEMPLATES_FILE"`
	TemplateSync  time.Duration `env:"NOTIFLOW_TEMPLATE_SYNC" default:"10s"`

	DLQMaxRedrives    int           `env:"NOTIFLOW_DLQ_MAX_REDRIVES" default:"3"`
	DLQRedriveMax     int           `env:"NOTIFLOW_DLQ_REDRIVE_MAX" default:"10000"`
	DLQRedriveMarkTTL time.Duration `env:"NOTIFLOW_DLQ_REDRIVE_MARK_TTL" default:"168h"`

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
	if _, err := mysql.ParseDSN(c.MySQLDSN); err != nil {
		add("NOTIFLOW_MYSQL_DSN", "not a valid DSN (user:pass@tcp(host:port)/db?parseTime=true): %v", err)
	}
	if c.GCPercent < 0 || c.GCPercent > 10000 {
		add("NOTIFLOW_GC_PERCENT", "must be between 0 and 10000, got %d", c.GCPercent)
	}
	if c.MySQLMaxConns < 2 {
		add("NOTIFLOW_MYSQL_MAX_CONNS", "must be at least 2, got %d", c.MySQLMaxConns)
	}
	if c.RedisAddr == "" {
		add("NOTIFLOW_REDIS_ADDR", "must not be empty")
	}
	switch {
	case c.APIToken == "" && !c.InsecureNoAuth:
		add("NOTIFLOW_API_TOKEN", "is required; set NOTIFLOW_INSECURE_NO_AUTH=true to run the API without authentication (development only)")
	case c.APIToken != "" && strings.TrimSpace(c.APIToken) != c.APIToken:
		add("NOTIFLOW_API_TOKEN", "must not start or end with whitespace")
	}
	if c.Tick < 10*time.Millisecond {
		add("NOTIFLOW_TICK", "must be at least 10ms, got %s", c.Tick)
	}
	if c.ClaimBatch < 1 || c.ClaimBatch > 20000 {
		add("NOTIFLOW_CLAIM_BATCH", "must be between 1 and 20000, got %d", c.ClaimBatch)
	}
	if c.RelayBatch < 1 || c.RelayBatch > 20000 {
		add("NOTIFLOW_RELAY_BATCH", "must be between 1 and 20000, got %d", c.RelayBatch)
	}
	if c.LockKey == "" {
		add("NOTIFLOW_LOCK_KEY", "must not be empty")
	}
	if c.LockTTL < time.Second {
		add("NOTIFLOW_LOCK_TTL", "must be at least 1s, got %s", c.LockTTL)
	}
	if c.MaxCatchUp < 1 {
		add("NOTIFLOW_MAX_CATCHUP", "must be at least 1, got %d", c.MaxCatchUp)
	}
	if c.OutboxRetention < 0 {
		add("NOTIFLOW_OUTBOX_RETENTION", "must not be negative, got %s", c.OutboxRetention)
	}
	if c.BulkMax < 1 || c.BulkMax > 100000 {
		add("NOTIFLOW_BULK_MAX", "must be between 1 and 100000, got %d", c.BulkMax)
	}
	if c.MaxParamsBytes < 2 || c.MaxParamsBytes > 1<<20 {
		add("NOTIFLOW_MAX_PARAMS_BYTES", "must be between 2 and 1048576, got %d", c.MaxParamsBytes)
	}
	if err := c.checkRecordLimit(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxBulkBodyBytes < 1024 {
		add("NOTIFLOW_MAX_BULK_BODY_BYTES", "must be at least 1024, got %d", c.MaxBulkBodyBytes)
	}
	if c.ShutdownTimeout < time.Second {
		add("NOTIFLOW_SHUTDOWN_TIMEOUT", "must be at least 1s, got %s", c.ShutdownTimeout)
	}
	if c.DLQMaxRedrives < 1 || c.DLQMaxRedrives > 100 {
		add("NOTIFLOW_DLQ_MAX_REDRIVES", "must be between 1 and 100, got %d", c.DLQMaxRedrives)
	}
	if c.DLQRedriveMax < 1 || c.DLQRedriveMax > 100000 {
		add("NOTIFLOW_DLQ_REDRIVE_MAX", "must be between 1 and 100000, got %d", c.DLQRedriveMax)
	}
	if c.DLQRedriveMarkTTL < time.Minute {
		add("NOTIFLOW_DLQ_REDRIVE_MARK_TTL", "must be at least 1m, got %s", c.DLQRedriveMarkTTL)
	}
	if c.DispatcherGroup == "" {
		add("NOTIFLOW_DISPATCHER_GROUP", "must not be empty")
	}
	if c.SinkGroup == "" {
		add("NOTIFLOW_SINK_GROUP", "must not be empty")
	}
	if c.BenchLead < 0 || c.BenchLead > time.Hour {
		add("NOTIFLOW_BENCH_LEAD", "must be between 0s and 1h, got %s", c.BenchLead)
	}
	if c.BenchStall < time.Second {
		add("NOTIFLOW_BENCH_STALL", "must be at least 1s, got %s", c.BenchStall)
	}
	if c.BenchSample < 10*time.Millisecond || c.BenchSample > 10*time.Second {
		add("NOTIFLOW_BENCH_SAMPLE", "must be between 10ms and 10s, got %s", c.BenchSample)
	}
	if c.FenceWait < 10*time.Millisecond || c.FenceWait > 5*time.Minute {
		add("NOTIFLOW_FENCE_WAIT", "must be between 10ms and 5m, got %s", c.FenceWait)
	}
	if c.FenceSync < 100*time.Millisecond || c.FenceSync > time.Minute {
		add("NOTIFLOW_FENCE_SYNC", "must be between 100ms and 1m, got %s", c.FenceSync)
	}
	if c.WebhookSecretSync < 100*time.Millisecond || c.WebhookSecretSync > 10*time.Minute {
		add("NOTIFLOW_WEBHOOK_SECRET_SYNC", "must be between 100ms and 10m, got %s", c.WebhookSecretSync)
	}
	// A rotated-out secret must outlive the time a new one takes to reach
	// every dispatcher (a sync pass plus the dispatcher's cache).
	if c.WebhookSecretGrace < 10*time.Minute || c.WebhookSecretGrace > 30*24*time.Hour {
		add("NOTIFLOW_WEBHOOK_SECRET_GRACE", "must be between 10m and 720h, got %s", c.WebhookSecretGrace)
	}
	if c.BenchMaxNotifications < 1 || c.BenchMaxNotifications > 10000000 {
		add("NOTIFLOW_BENCH_MAX_NOTIFICATIONS", "must be between 1 and 10000000, got %d", c.BenchMaxNotifications)
	}
	if c.TemplateSync < 100*time.Millisecond || c.TemplateSync > 10*time.Minute {
		add("NOTIFLOW_TEMPLATE_SYNC", "must be between 100ms and 10m, got %s", c.TemplateSync)
	}
	for _, a := range c.WebhookAllow {
		if !netguard.ValidAllowEntry(a) {
			add("NOTIFLOW_WEBHOOK_ALLOW", "%q is neither a CIDR (10.1.0.0/16), an IP address nor a host name", a)
		}
	}
	if err := checkBaseURL(c.SinkAPIURL); err != nil {
		add("NOTIFLOW_SINK_API_URL", "%v", err)
	}
	if err := c.HTTP.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Kafka.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkBaseURL accepts an empty value or an absolute http(s) URL with a
// host and no query or fragment.
func checkBaseURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("must be an http:// or https:// URL, got %q", s)
	case u.Host == "":
		return fmt.Errorf("must name a host, got %q", s)
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("must have no query or fragment, got %q", s)
	}
	return nil
}

// checkRecordLimit reports a params limit that lets a notification, its
// other fields at their longest, outgrow one Kafka record of the
// producer's limit (the relay would have to park it). Both limits must be
// in their ranges; Validate reports them otherwise.
func (c Config) checkRecordLimit() error {
	if c.MaxParamsBytes < 2 || c.MaxParamsBytes > 1<<20 || c.Kafka.MaxMessageBytes < 1024 {
		return nil
	}
	worst := adapters.MaxDueRecordBytes(c.MaxParamsBytes)
	if worst <= c.Kafka.MaxMessageBytes {
		return nil
	}
	if fits := c.MaxParamsBytes - (worst - c.Kafka.MaxMessageBytes); fits >= 2 {
		return libconfig.Errorf("NOTIFLOW_MAX_PARAMS_BYTES", "%d lets a notification reach %d bytes as a Kafka record, over NOTIFLOW_KAFKA_MAX_MESSAGE_BYTES (%d): set it to at most %d, or raise NOTIFLOW_KAFKA_MAX_MESSAGE_BYTES (and the due topic's max.message.bytes with it)",
			c.MaxParamsBytes, worst, c.Kafka.MaxMessageBytes, fits)
	}
	return libconfig.Errorf("NOTIFLOW_KAFKA_MAX_MESSAGE_BYTES", "%d is too small for a notification with the longest fields: at least %d bytes",
		c.Kafka.MaxMessageBytes, adapters.MaxDueRecordBytes(2))
}

// LogValue is what a log line shows of c: every variable as -print-config
// prints it, secrets redacted (lib/config's LogValue).
func (c Config) LogValue() slog.Value { return libconfig.LogValue(c) }

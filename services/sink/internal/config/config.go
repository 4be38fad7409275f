// Package config is the sink's configuration: every NOTIFLOW_* variable it
// reads, with its default, and the checks that stop the process at start
// when a value cannot work.
package config

import (
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	libconfig "github.com/notiflow/notiflow/lib/config"
	"github.com/notiflow/notiflow/lib/consume"
	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/obs"
)

// Config is the sink's configuration. Load it with lib/config
// (lib/svc's svc.Program in main), which validates it.
type Config struct {
	HTTPAddr string `env:"NOTIFLOW_HTTP_ADDR" default:":8082"`
	// APIToken is the bearer token of the read API (the scheduler's
	// variable: one token for the whole API). Secret: never logged.
	APIToken       string `env:"NOTIFLOW_API_TOKEN" secret:"true"`
	InsecureNoAuth bool   `env:"NOTIFLOW_INSECURE_NO_AUTH" default:"false"`
	LogLevel       string `env:"NOTIFLOW_LOG_LEVEL" default:"info"`
	// Pprof serves /debug/pprof/ on the HTTP address behind the API's
	// bearer token (off by default).
	Pprof bool `env:"NOTIFLOW_PPROF" default:"false"`
	// GCPercent is the Go GC target (as GOGC) applied at start unless GOGC
	// is set; 0 keeps Go's default. 400: the sink allocates per record but
	// keeps little alive (bench/README.md, sink).
	GCPercent int `env:"NOTIFLOW_GC_PERCENT" default:"400"`
	// MySQLDSN holds the password: never logged as is.
	MySQLDSN string `env:"NOTIFLOW_MYSQL_DSN" secret:"dsn" default:"notiflow:notiflow@tcp(127.0.0.1:3306)/notiflow?parseTime=true&loc=UTC"`
	Group    string `env:"NOTIFLOW_GROUP" default:"notiflow-sink"`

	BatchSize        int           `env:"NOTIFLOW_BATCH_SIZE" default:"200"`
	BatchIdle        time.Duration `env:"NOTIFLOW_BATCH_IDLE" default:"1s"`
	BatchMaxAge      time.Duration `env:"NOTIFLOW_BATCH_MAX_AGE" default:"2s"`
	FlushConcurrency int           `env:"NOTIFLOW_FLUSH_CONCURRENCY" default:"4"`
	FlushTimeout     time.Duration `env:"NOTIFLOW_FLUSH_TIMEOUT" default:"30s"`
	RetryBackoffMax  time.Duration `env:"NOTIFLOW_RETRY_BACKOFF_MAX" default:"2s"`
	MaxInFlight      int           `env:"NOTIFLOW_MAX_IN_FLIGHT" default:"5000"`
	// FetchMinBytes is the least data Kafka gathers for one fetch of a
	// partition of results before it answers (lib/consume's
	// Config.FetchMinBytes, with its default fetch wait). 1, the default,
	// answers at once; more trades latency of every result (and of the
	// inbox channel's deliveries, which the sink's rows are) for fewer
	// broker requests (bench/README.md, what Kafka spends). Not used in
	// naive mode.
	FetchMinBytes int `env:"NOTIFLOW_FETCH_MIN_BYTES" default:"1"`
	// Naive writes one row and commits one offset per record: the
	// baseline every sink benchmark compares against.
	Naive bool `env:"NOTIFLOW_SINK_NAIVE" default:"false"`

	ShutdownTimeout time.Duration `env:"NOTIFLOW_SHUTDOWN_TIMEOUT" default:"20s"`

	HTTP  obs.ServerConfig
	Kafka kafkax.Config
}

// DrainTimeout is how long the consumer may take to finish its in-flight
// batches at shutdown: most of NOTIFLOW_SHUTDOWN_TIMEOUT, leaving time for
// the final commit and leaving the group.
func (c Config) DrainTimeout() time.Duration { return c.ShutdownTimeout * 3 / 4 }

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
	if c.GCPercent < 0 || c.GCPercent > 10000 {
		add("NOTIFLOW_GC_PERCENT", "must be between 0 and 10000, got %d", c.GCPercent)
	}
	switch {
	case c.APIToken == "" && !c.InsecureNoAuth:
		add("NOTIFLOW_API_TOKEN", "is required; set NOTIFLOW_INSECURE_NO_AUTH=true to run the read API without authentication (development only)")
	case c.APIToken != "" && strings.TrimSpace(c.APIToken) != c.APIToken:
		add("NOTIFLOW_API_TOKEN", "must not start or end with whitespace")
	}
	if _, err := mysql.ParseDSN(c.MySQLDSN); err != nil {
		add("NOTIFLOW_MYSQL_DSN", "not a valid DSN (user:pass@tcp(host:port)/db?parseTime=true): %v", err)
	}
	if c.Group == "" {
		add("NOTIFLOW_GROUP", "must not be empty")
	}
	// 19 placeholders per row; MySQL allows 65535 per statement.
	if c.BatchSize < 1 || c.BatchSize > 3000 {
		add("NOTIFLOW_BATCH_SIZE", "must be between 1 and 3000, got %d", c.BatchSize)
	}
	if c.BatchIdle < time.Millisecond {
		add("NOTIFLOW_BATCH_IDLE", "must be at least 1ms, got %s", c.BatchIdle)
	}
	if c.BatchMaxAge < c.BatchIdle {
		add("NOTIFLOW_BATCH_MAX_AGE", "must be at least NOTIFLOW_BATCH_IDLE (%s), got %s", c.BatchIdle, c.BatchMaxAge)
	}
	if c.FlushConcurrency < 1 || c.FlushConcurrency > 64 {
		add("NOTIFLOW_FLUSH_CONCURRENCY", "must be between 1 and 64, got %d", c.FlushConcurrency)
	}
	if c.FlushTimeout < 100*time.Millisecond {
		add("NOTIFLOW_FLUSH_TIMEOUT", "must be at least 100ms, got %s", c.FlushTimeout)
	}
	if c.RetryBackoffMax < 50*time.Millisecond {
		add("NOTIFLOW_RETRY_BACKOFF_MAX", "must be at least 50ms, got %s", c.RetryBackoffMax)
	}
	if c.MaxInFlight < c.BatchSize*(c.FlushConcurrency+1) {
		add("NOTIFLOW_MAX_IN_FLIGHT", "must be at least NOTIFLOW_BATCH_SIZE x (NOTIFLOW_FLUSH_CONCURRENCY+1) = %d so that every flusher can get a full batch, got %d",
			c.BatchSize*(c.FlushConcurrency+1), c.MaxInFlight)
	}
	if c.FetchMinBytes < 1 || c.FetchMinBytes > consume.DefaultFetchMaxBytes {
		add("NOTIFLOW_FETCH_MIN_BYTES", "must be between 1 and %d (the consumer's largest fetch), got %d", consume.DefaultFetchMaxBytes, c.FetchMinBytes)
	}
	// The consumer's drain (3/4 of it) must stay below its 30s rebalance
	// timeout.
	if c.ShutdownTimeout < time.Second || c.ShutdownTimeout > 39*time.Second {
		add("NOTIFLOW_SHUTDOWN_TIMEOUT", "must be between 1s and 39s, got %s", c.ShutdownTimeout)
	}
	if err := c.HTTP.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Kafka.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// LogValue is what a log line shows of c: every variable as -print-config
// prints it, secrets redacted (lib/config's LogValue).
func (c Config) LogValue() slog.Value { return libconfig.LogValue(c) }

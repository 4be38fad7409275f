package config

import (
	"bytes"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	libconfig "github.com/notiflow/notiflow/lib/config"
)

// load fills a Config from env alone (not the process environment).
func load(env map[string]string) (Config, error) {
	return libconfig.LoadAs[Config](libconfig.MapLookup(env))
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give map[string]string
		want []string // substrings of the error; none means valid
	}{
		{name: "no token and no insecure flag", give: map[string]string{}, want: []string{"NOTIFLOW_API_TOKEN: is required"}},
		{name: "insecure flag without token", give: map[string]string{"NOTIFLOW_INSECURE_NO_AUTH": "true"}},
		{name: "token", give: map[string]string{"NOTIFLOW_API_TOKEN": "s3cret"}},
		{
			name: "bad values name their variables",
			give: map[string]string{"NOTIFLOW_API_TOKEN": "x", "NOTIFLOW_CLAIM_BATCH": "0", "NOTIFLOW_TICK": "1ms", "NOTIFLOW_LOCK_TTL": "10ms", "NOTIFLOW_KAFKA_PARTITIONS": "0", "NOTIFLOW_GC_PERCENT": "-1"},
			want: []string{"NOTIFLOW_CLAIM_BATCH", "NOTIFLOW_TICK", "NOTIFLOW_LOCK_TTL", "NOTIFLOW_KAFKA_PARTITIONS", "NOTIFLOW_GC_PERCENT: must be between 0 and 10000, got -1"},
		},
		{
			name: "bad benchmark settings name their variables",
			give: map[string]string{
				"NOTIFLOW_API_TOKEN": "x", "NOTIFLOW_BENCH_LEAD": "-1s",
				"NOTIFLOW_BENCH_STALL": "10ms", "NOTIFLOW_BENCH_SAMPLE": "1ms", "NOTIFLOW_BENCH_MAX_NOTIFICATIONS": "0",
			},
			want: []string{"NOTIFLOW_BENCH_LEAD", "NOTIFLOW_BENCH_STALL", "NOTIFLOW_BENCH_SAMPLE", "NOTIFLOW_BENCH_MAX_NOTIFICATIONS"},
		},
		{
			name: "bad webhook secret settings name their variables",
			give: map[string]string{"NOTIFLOW_API_TOKEN": "x", "NOTIFLOW_WEBHOOK_SECRET_GRACE": "1m", "NOTIFLOW_WEBHOOK_SECRET_SYNC": "1h"},
			want: []string{"NOTIFLOW_WEBHOOK_SECRET_GRACE: must be between 10m and 720h, got 1m0s", "NOTIFLOW_WEBHOOK_SECRET_SYNC: must be between 100ms and 10m, got 1h0m0s"},
		},
		{
			name: "bad dead-letter redrive settings name their variables",
			give: map[string]string{"NOTIFLOW_API_TOKEN": "x", "NOTIFLOW_DLQ_MAX_REDRIVES": "0", "NOTIFLOW_DLQ_REDRIVE_MAX": "0", "NOTIFLOW_DLQ_REDRIVE_MARK_TTL": "1s"},
			want: []string{"NOTIFLOW_DLQ_MAX_REDRIVES: must be between 1 and 100, got 0", "NOTIFLOW_DLQ_REDRIVE_MAX: must be between 1 and 100000, got 0", "NOTIFLOW_DLQ_REDRIVE_MARK_TTL: must be at least 1m, got 1s"},
		},
		{
			name: "params that cannot fit a record",
			give: map[string]string{"NOTIFLOW_API_TOKEN": "x", "NOTIFLOW_MAX_PARAMS_BYTES": "1048576", "NOTIFLOW_KAFKA_MAX_MESSAGE_BYTES": "1000000"},
			want: []string{"NOTIFLOW_MAX_PARAMS_BYTES: 1048576 lets a notification reach", "set it to at most 996952,"},
		},
		{
			name: "a record limit too small for any notification",
			give: map[string]string{"NOTIFLOW_API_TOKEN": "x", "NOTIFLOW_MAX_PARAMS_BYTES": "64", "NOTIFLOW_KAFKA_MAX_MESSAGE_BYTES": "1024"},
			want: []string{"NOTIFLOW_KAFKA_MAX_MESSAGE_BYTES: 1024 is too small"},
		},
		{
			name: "the largest params that fit",
			give: map[string]string{"NOTIFLOW_API_TOKEN": "x", "NOTIFLOW_MAX_PARAMS_BYTES": "990000", "NOTIFLOW_KAFKA_MAX_MESSAGE_BYTES": "1000000"},
		},
		{name: "webhook allow list", give: map[string]string{"NOTIFLOW_API_TOKEN": "x", "NOTIFLOW_WEBHOOK_ALLOW": "127.0.0.1/32,::1,hooks.internal"}},
		{
			name: "webhook allow list entry",
			give: map[string]string{"NOTIFLOW_API_TOKEN": "x", "NOTIFLOW_WEBHOOK_ALLOW": "10.0.0.0/33"},
			want: []string{"NOTIFLOW_WEBHOOK_ALLOW: \"10.0.0.0/33\" is neither a CIDR"},
		},
		{name: "sink API URL", give: map[string]string{"NOTIFLOW_API_TOKEN": "x", "NOTIFLOW_SINK_API_URL": "http://sink:8082"}},
		{
			name: "sink API URL without scheme",
			give: map[string]string{"NOTIFLOW_API_TOKEN": "x", "NOTIFLOW_SINK_API_URL": "sink:8082"},
			want: []string{"NOTIFLOW_SINK_API_URL: must be an http:// or https:// URL"},
		},
		{
			name: "sink API URL with a query",
			give: map[string]string{"NOTIFLOW_API_TOKEN": "x", "NOTIFLOW_SINK_API_URL": "http://sink:8082/?a=b"},
			want: []string{"NOTIFLOW_SINK_API_URL: must have no query"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := load((tt.give))
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			err = c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: want an error naming %v", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := load((map[string]string{}))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		HTTPAddr: ":8080", MySQLDSN: "notiflow:notiflow@tcp(127.0.0.1:3306)/notiflow?parseTime=true&loc=UTC", MySQLMaxConns: 16,
		RedisAddr: "127.0.0.1:6379", LogLevel: "info", GCPercent: 400,
		ScanEnabled: true, Tick: time.Second, ClaimBatch: 5000, RelayBatch: 5000, LockKey: "notiflow:scheduler:scan",
		LockTTL: 10 * time.Second, CollapseMissed: true, MaxCatchUp: 100, OutboxRetention: time.Hour,
		BulkMax: 10000, MaxParamsBytes: 16384, MaxBulkBodyBytes: 32 << 20, ShutdownTimeout: 20 * time.Second,
		RedisPrefix: "notiflow:", DispatcherGroup: "notiflow-dispatcher", SinkGroup: "notiflow-sink",
		BenchLead: 5 * time.Second, BenchStall: 60 * time.Second, BenchSample: 250 * time.Millisecond, BenchMaxNotifications: 1000000,
		WebhookSecretGrace: 24 * time.Hour, WebhookSecretSync: 10 * time.Second, TemplateSync: 10 * time.Second,
		FenceWait: 8 * time.Second, FenceSync: time.Second,
		DLQMaxRedrives: 3, DLQRedriveMax: 10000, DLQRedriveMarkTTL: 168 * time.Hour,
		HTTP: c.HTTP, Kafka: c.Kafka, // lib/obs and lib/kafkax test their own
	}
	if !reflect.DeepEqual(c, want) || c.Kafka.TopicDue != "notify.due.v1" {
		t.Fatalf("defaults:\n got %+v\nwant %+v", c, want)
	}
}

func TestLogValueHidesSecrets(t *testing.T) {
	t.Parallel()
	c, _ := load((map[string]string{
		"NOTIFLOW_API_TOKEN": "tok-abc", "NOTIFLOW_REDIS_PASSWORD": "redis-pw",
		"NOTIFLOW_MYSQL_DSN": "u:db-pw@tcp(h:3306)/d?parseTime=true",
	}))
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "config", c)
	for _, secret := range []string{"tok-abc", "redis-pw", "db-pw"} {
		if strings.Contains(buf.String(), secret) {
			t.Errorf("log line shows %q: %s", secret, buf.String())
		}
	}
}

// TestPrintHidesSecrets checks what -print-config shows: every variable,
// none of the secrets.
func TestPrintHidesSecrets(t *testing.T) {
	t.Parallel()
	c, err := load(map[string]string{
		"NOTIFLOW_API_TOKEN": "tok-abc", "NOTIFLOW_REDIS_PASSWORD": "redis-pw",
		"NOTIFLOW_MYSQL_DSN": "u:db-pw@tcp(h:3306)/d?parseTime=true",
	})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := libconfig.Print(&buf, &c); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"tok-abc", "redis-pw", "db-pw"} {
		if strings.Contains(buf.String(), secret) {
			t.Errorf("-print-config shows %q:\n%s", secret, buf.String())
		}
	}
	for _, line := range []string{"NOTIFLOW_API_TOKEN=redacted\n", "NOTIFLOW_MYSQL_DSN=u:redacted@tcp(h:3306)/d?parseTime=true\n", "NOTIFLOW_TICK=1s\n"} {
		if !strings.Contains(buf.String(), line) {
			t.Errorf("-print-config lacks %q:\n%s", line, buf.String())
		}
	}
	if n := strings.Count(buf.String(), "\n"); n != len(libconfig.Vars(&c)) {
		t.Errorf("-print-config prints %d lines for %d variables", n, len(libconfig.Vars(&c)))
	}
}

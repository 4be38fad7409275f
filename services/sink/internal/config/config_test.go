package config

import (
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

func TestDefaultsAreValid(t *testing.T) {
	t.Parallel()
	c, err := load(map[string]string{"NOTIFLOW_API_TOKEN": "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	want := Config{
		HTTPAddr: ":8082", APIToken: "s3cret", LogLevel: "info", GCPercent: 400, MySQLDSN: "notiflow:notiflow@tcp(127.0.0.1:3306)/notiflow?parseTime=true&loc=UTC",
		Group: "notiflow-sink", BatchSize: 200, BatchIdle: time.Second, BatchMaxAge: 2 * time.Second, FlushConcurrency: 4,
		FlushTimeout: 30 * time.Second, RetryBackoffMax: 2 * time.Second, MaxInFlight: 5000, FetchMinBytes: 1, ShutdownTimeout: 20 * time.Second,
		HTTP: c.HTTP, Kafka: c.Kafka, // lib/obs and lib/kafkax test their own
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", c, want)
	}
}

func TestValidateNamesTheVariable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give map[string]string
		want string
	}{
		{map[string]string{}, "NOTIFLOW_API_TOKEN: is required"},
		{map[string]string{"NOTIFLOW_API_TOKEN": " x"}, "NOTIFLOW_API_TOKEN: must not start or end with whitespace"},
		{map[string]string{"NOTIFLOW_INSECURE_NO_AUTH": "true"}, ""},
		{map[string]string{"NOTIFLOW_BATCH_SIZE": "0"}, "NOTIFLOW_BATCH_SIZE"},
		{map[string]string{"NOTIFLOW_BATCH_IDLE": "5s", "NOTIFLOW_BATCH_MAX_AGE": "1s"}, "NOTIFLOW_BATCH_MAX_AGE"},
		{map[string]string{"NOTIFLOW_FLUSH_CONCURRENCY": "0"}, "NOTIFLOW_FLUSH_CONCURRENCY"},
		{map[string]string{"NOTIFLOW_MAX_IN_FLIGHT": "100"}, "NOTIFLOW_MAX_IN_FLIGHT"},
		{map[string]string{"NOTIFLOW_FETCH_MIN_BYTES": "0"}, "NOTIFLOW_FETCH_MIN_BYTES: must be between 1 and 4194304"},
		{map[string]string{"NOTIFLOW_FETCH_MIN_BYTES": "4194305"}, "NOTIFLOW_FETCH_MIN_BYTES"},
		{map[string]string{"NOTIFLOW_FETCH_MIN_BYTES": "65536"}, ""},
		{map[string]string{"NOTIFLOW_MYSQL_DSN": "nonsense"}, "NOTIFLOW_MYSQL_DSN"},
		{map[string]string{"NOTIFLOW_SHUTDOWN_TIMEOUT": "60s"}, "NOTIFLOW_SHUTDOWN_TIMEOUT"},
		{map[string]string{"NOTIFLOW_GROUP": " "}, ""},
	}
	for _, tt := range tests {
		if _, set := tt.give["NOTIFLOW_INSECURE_NO_AUTH"]; !set && !strings.HasPrefix(tt.want, "NOTIFLOW_API_TOKEN") {
			tt.give["NOTIFLOW_API_TOKEN"] = "s3cret"
		}
		c, err := load(tt.give)
		if err != nil {
			t.Fatal(err)
		}
		err = c.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("%v: unexpected error %v", tt.give, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want one naming %s", tt.give, err, tt.want)
		}
	}
}

func TestLogValueHidesTheSecrets(t *testing.T) {
	t.Parallel()
	c, _ := load(map[string]string{"NOTIFLOW_MYSQL_DSN": "u:s3cret@tcp(db:3306)/x", "NOTIFLOW_API_TOKEN": "t0ken"})
	if s := c.LogValue().String(); strings.Contains(s, "s3cret") || strings.Contains(s, "t0ken") {
		t.Fatalf("password logged: %s", s)
	}
}

func TestBadValueIsReported(t *testing.T) {
	t.Parallel()
	_, err := load((map[string]string{"NOTIFLOW_BATCH_IDLE": "soon"}))
	if err == nil || !strings.Contains(err.Error(), "NOTIFLOW_BATCH_IDLE") {
		t.Fatalf("err = %v", err)
	}
}

func TestPrintHidesThePassword(t *testing.T) {
	t.Parallel()
	c, err := load(map[string]string{"NOTIFLOW_MYSQL_DSN": "u:s3cret@tcp(db:3306)/x"})
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	if err := libconfig.Print(&buf, &c); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "s3cret") || !strings.Contains(buf.String(), "NOTIFLOW_MYSQL_DSN=u:redacted@tcp(db:3306)/x\n") {
		t.Fatalf("-print-config shows:\n%s", buf.String())
	}
}

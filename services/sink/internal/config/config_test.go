package config

import (
	"strings"
	"testing"
)

func lookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestDefaultsAreValid(t *testing.T) {
	t.Parallel()
	c, err := LoadFrom(lookup(map[string]string{"NOTIFLOW_API_TOKEN": "s3cret"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if c.BatchSize != DefaultBatchSize || c.BatchIdle != DefaultBatchIdle || c.Group != DefaultGroup ||
		c.FlushConcurrency != DefaultFlushConcurrency || c.HTTPAddr != DefaultHTTPAddr || c.MaxInFlight != DefaultMaxInFlight {
		t.Fatalf("tags and constants disagree: %+v", c)
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
		{map[string]string{"NOTIFLOW_MYSQL_DSN": "nonsense"}, "NOTIFLOW_MYSQL_DSN"},
		{map[string]string{"NOTIFLOW_SHUTDOWN_TIMEOUT": "60s"}, "NOTIFLOW_SHUTDOWN_TIMEOUT"},
		{map[string]string{"NOTIFLOW_GROUP": " "}, ""},
	}
	for _, tt := range tests {
		if _, set := tt.give["NOTIFLOW_INSECURE_NO_AUTH"]; !set && !strings.HasPrefix(tt.want, "NOTIFLOW_API_TOKEN") {
			tt.give["NOTIFLOW_API_TOKEN"] = "s3cret"
		}
		c, err := LoadFrom(lookup(tt.give))
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
	c, _ := LoadFrom(lookup(map[string]string{"NOTIFLOW_MYSQL_DSN": "u:s3cret@tcp(db:3306)/x", "NOTIFLOW_API_TOKEN": "t0ken"}))
	if s := c.LogValue().String(); strings.Contains(s, "s3cret") || strings.Contains(s, "t0ken") {
		t.Fatalf("password logged: %s", s)
	}
}

func TestBadValueIsReported(t *testing.T) {
	t.Parallel()
	_, err := LoadFrom(lookup(map[string]string{"NOTIFLOW_BATCH_IDLE": "soon"}))
	if err == nil || !strings.Contains(err.Error(), "NOTIFLOW_BATCH_IDLE") {
		t.Fatalf("err = %v", err)
	}
}

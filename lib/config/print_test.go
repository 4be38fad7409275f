package config

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

type secrets struct {
	Addr     string        `env:"T_ADDR" default:"127.0.0.1:1"`
	Token    string        `env:"T_TOKEN" secret:"true"`
	Password string        `env:"T_PASSWORD" secret:"true"`
	DSN      string        `env:"T_DSN" secret:"dsn" default:"u:def-pw@tcp(127.0.0.1:3306)/d?parseTime=true"`
	Wait     time.Duration `env:"T_WAIT" default:"1m30s"`
	Ratio    float64       `env:"T_RATIO" default:"0.25"`
	Debug    bool          `env:"T_DEBUG"`
	Kafka    inner
}

func (s *secrets) Validate() error {
	if s.Wait < time.Second {
		return Errorf("T_WAIT", "must be at least 1s, got %s", s.Wait)
	}
	return nil
}

func TestPrint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give map[string]string
		want string
	}{
		{
			name: "defaults",
			give: map[string]string{},
			want: "T_ADDR=127.0.0.1:1\nT_TOKEN=\nT_PASSWORD=\nT_DSN=u:redacted@tcp(127.0.0.1:3306)/d?parseTime=true\n" +
				"T_WAIT=1m30s\nT_RATIO=0.25\nT_DEBUG=false\nT_BROKERS=127.0.0.1:9092\n",
		},
		{
			name: "secrets redacted",
			give: map[string]string{"T_TOKEN": "tok-s3cret", "T_PASSWORD": "pw-s3cret", "T_DSN": "app:db-s3cret@tcp(db:3306)/x", "T_BROKERS": "a:1, b:2", "T_DEBUG": "true"},
			want: "T_ADDR=127.0.0.1:1\nT_TOKEN=redacted\nT_PASSWORD=redacted\nT_DSN=app:redacted@tcp(db:3306)/x\n" +
				"T_WAIT=1m30s\nT_RATIO=0.25\nT_DEBUG=true\nT_BROKERS=a:1,b:2\n",
		},
		{
			name: "a DSN that does not parse is not shown",
			give: map[string]string{"T_DSN": "app:db-s3cret@db:3306"},
			want: "T_ADDR=127.0.0.1:1\nT_TOKEN=\nT_PASSWORD=\nT_DSN=invalid\n" +
				"T_WAIT=1m30s\nT_RATIO=0.25\nT_DEBUG=false\nT_BROKERS=127.0.0.1:9092\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var c secrets
			if err := LoadFrom(MapLookup(tt.give), &c); err != nil {
				t.Fatalf("LoadFrom: %v", err)
			}
			var buf bytes.Buffer
			if err := Print(&buf, &c); err != nil {
				t.Fatalf("Print: %v", err)
			}
			if buf.String() != tt.want {
				t.Errorf("Print =\n%s\nwant\n%s", buf.String(), tt.want)
			}
			for _, secret := range []string{"s3cret", "def-pw"} {
				if strings.Contains(buf.String(), secret) {
					t.Errorf("Print shows %q:\n%s", secret, buf.String())
				}
			}
		})
	}
}

// TestPrintRoundTrips checks that every printed value loads back to the
// same configuration (secrets aside): the output is the environment that
// reproduces it.
func TestPrintRoundTrips(t *testing.T) {
	t.Parallel()
	give := map[string]string{"T_NAME": "x", "T_WORKERS": "8", "T_WAIT": "1h2m3.5s", "T_RATIO": "0.125", "T_DEBUG": "true", "T_BROKERS": "a:1,b:2"}
	var want sample
	if err := LoadFrom(MapLookup(give), &want); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Print(&buf, want); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("line %q is not NAME=value", line)
		}
		env[name] = value
	}
	var got sample
	if err := LoadFrom(MapLookup(env), &got); err != nil {
		t.Fatal(err)
	}
	if got.Name != want.Name || got.Workers != want.Workers || got.Wait != want.Wait || got.Ratio != want.Ratio ||
		got.Debug != want.Debug || strings.Join(got.Kafka.Brokers, ",") != strings.Join(want.Kafka.Brokers, ",") {
		t.Errorf("printed %q loads back as %+v, want %+v", buf.String(), got, want)
	}
}

func TestPrintWriteError(t *testing.T) {
	t.Parallel()
	if err := Print(failingWriter{}, &sample{}); err == nil {
		t.Fatal("Print to a failing writer: nil error")
	}
	if err := Print(&bytes.Buffer{}, 3); err == nil {
		t.Fatal("Print of an int: nil error")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	tests := []struct{ give, want string }{
		{"app:pw-s3cret@tcp(db:3306)/x?parseTime=true", "app:redacted@tcp(db:3306)/x?parseTime=true"},
		{"app@tcp(db:3306)/x", "app@tcp(db:3306)/x"},
		{"", ""},
		{"app:pw-s3cret@db", "invalid"},
	}
	for _, tt := range tests {
		if got := RedactDSN(tt.give); got != tt.want {
			t.Errorf("RedactDSN(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

// TestLogValueIsWhatPrintShows: the log shows every variable Print writes,
// with the same values, secrets redacted.
func TestLogValueIsWhatPrintShows(t *testing.T) {
	c := secrets{Addr: "h:1", Token: "tok-s3cret", Password: "pw-s3cret", DSN: "u:dsn-s3cret@tcp(h:3306)/d", Wait: time.Minute}
	var buf bytes.Buffer
	if err := Print(&buf, c); err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	for _, a := range LogValue(c).Group() {
		fmt.Fprintf(&logged, "%s=%s\n", a.Key, a.Value.String())
	}
	if logged.String() != buf.String() {
		t.Errorf("LogValue shows\n%s\nPrint writes\n%s", logged.String(), buf.String())
	}
	if strings.Contains(logged.String(), "s3cret") {
		t.Errorf("LogValue shows a secret: %s", logged.String())
	}
}

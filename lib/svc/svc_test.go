package svc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
)

type testConfig struct {
	Level string
	Bad   bool
}

func (c testConfig) Validate() error {
	if c.Bad {
		return errors.New("NOTIFLOW_X: must be set")
	}
	return nil
}

func program(cfg testConfig, run func(context.Context, testConfig, *slog.Logger) error) Program[testConfig] {
	return Program[testConfig]{
		Name:     "svctest",
		Load:     func() (testConfig, error) { return cfg, nil },
		LogLevel: func(c testConfig) string { return c.Level },
		PrintConfig: func(w io.Writer, c testConfig) error {
			_, err := fmt.Fprintf(w, "level=%s\n", c.Level)
			return err
		},
		Run: run,
	}
}

func TestExec(t *testing.T) {
	t.Parallel()
	ok := func(context.Context, testConfig, *slog.Logger) error { return nil }
	tests := []struct {
		name       string
		give       Program[testConfig]
		args       []string
		wantStatus int
		wantOut    string // in stdout
		wantErr    string // in stderr
	}{
		{name: "clean run", give: program(testConfig{Level: "info"}, ok), wantStatus: ExitOK, wantOut: `"msg":"svctest stopped"`},
		{name: "run fails", give: program(testConfig{Level: "info"}, func(context.Context, testConfig, *slog.Logger) error {
			return errors.New("boom")
		}), wantStatus: ExitFailed, wantOut: `"err":"boom"`},
		{name: "invalid config", give: program(testConfig{Level: "info", Bad: true}, ok), wantStatus: ExitUsage, wantErr: "NOTIFLOW_X: must be set"},
		{name: "bad log level", give: program(testConfig{Level: "loud"}, ok), wantStatus: ExitUsage, wantErr: "NOTIFLOW_LOG_LEVEL"},
		{name: "print config", give: program(testConfig{Level: "warn"}, func(context.Context, testConfig, *slog.Logger) error {
			return errors.New("must not run")
		}), args: []string{"-print-config"}, wantStatus: ExitOK, wantOut: "level=warn\n"},
		{name: "print invalid config", give: program(testConfig{Level: "warn", Bad: true}, ok), args: []string{"-print-config"},
			wantStatus: ExitUsage, wantOut: "level=warn\n", wantErr: "NOTIFLOW_X: must be set"},
		{name: "unknown flag", give: program(testConfig{Level: "info"}, ok), args: []string{"-nope"}, wantStatus: ExitUsage, wantErr: "-nope"},
		{name: "stray argument", give: program(testConfig{Level: "info"}, ok), args: []string{"extra"}, wantStatus: ExitUsage, wantErr: "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			got := tt.give.Exec(context.Background(), tt.args, &out, &errOut)
			if got != tt.wantStatus {
				t.Fatalf("status %d, want %d; stdout:\n%s\nstderr:\n%s", got, tt.wantStatus, &out, &errOut)
			}
			if !strings.Contains(out.String(), tt.wantOut) {
				t.Errorf("stdout lacks %q:\n%s", tt.wantOut, &out)
			}
			if !strings.Contains(errOut.String(), tt.wantErr) {
				t.Errorf("stderr lacks %q:\n%s", tt.wantErr, &errOut)
			}
		})
	}
}

// Without a PrintConfig hook, -print-config prints lib/config's NAME=value
// lines of the configuration's env tags.
func TestExecPrintsWithLibConfigByDefault(t *testing.T) {
	t.Parallel()
	type cfg struct {
		testConfig
		Tick string `env:"NOTIFLOW_SVCTEST_TICK" default:"1s"`
	}
	p := Program[cfg]{
		Name:     "svctest",
		LogLevel: func(cfg) string { return "info" },
		Run: func(context.Context, cfg, *slog.Logger) error {
			return errors.New("must not run")
		},
	}
	var out, errOut bytes.Buffer
	if got := p.Exec(context.Background(), []string{"-print-config"}, &out, &errOut); got != ExitOK {
		t.Fatalf("status %d; stderr:\n%s", got, &errOut)
	}
	if !strings.Contains(out.String(), "NOTIFLOW_SVCTEST_TICK=1s") {
		t.Fatalf("stdout lacks NOTIFLOW_SVCTEST_TICK=1s:\n%s", &out)
	}
}

func TestExecStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	p := program(testConfig{Level: "info"}, func(ctx context.Context, _ testConfig, _ *slog.Logger) error {
		cancel() // as a signal would
		<-ctx.Done()
		return nil
	})
	var out, errOut bytes.Buffer
	if got := p.Exec(ctx, nil, &out, &errOut); got != ExitOK {
		t.Fatalf("status %d; stderr:\n%s", got, &errOut)
	}
}

package svc

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/notiflow/notiflow/lib/config"
	"github.com/notiflow/notiflow/lib/obs"
)

// Exit statuses of a service process.
const (
	ExitOK     = 0
	ExitFailed = 1 // the service failed while running
	ExitUsage  = 2 // bad flags or an invalid configuration: nothing was started
)

// Config is what Program needs of a service's configuration.
type Config interface {
	// Validate reports every setting that cannot work, naming its variable.
	Validate() error
}

// Program is one service binary.
type Program[C Config] struct {
	// Name is the service's name, on every log line and in messages.
	Name string
	// Load reads the configuration from the environment (Exec validates
	// it); nil: lib/config's Load, which fills C from its env and default
	// tags.
	Load func() (C, error)
	// LogLevel returns cfg's log level ("debug", "info", "warn", "error").
	LogLevel func(cfg C) string
	// GCPercent, when set, returns the GC target applied at start unless
	// GOGC is set (see SetGCPercent).
	GCPercent func(cfg C) int
	// PrintConfig writes cfg for the -print-config flag: the binary writes
	// the effective configuration (as loaded, before validation) to stdout
	// with it and exits without starting, with ExitUsage when the
	// configuration is invalid. nil: lib/config's Print (every NOTIFLOW_*
	// variable as NAME=value, secrets redacted).
	PrintConfig func(w io.Writer, cfg C) error
	// Run runs the service until ctx ends (SIGINT or SIGTERM) and returns
	// nil after a clean shutdown.
	Run func(ctx context.Context, cfg C, log *slog.Logger) error
}

// Main runs p with the process's arguments and exits with its status.
func Main[C Config](p Program[C]) {
	os.Exit(p.Exec(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// Exec is Main without the exit: it parses args, loads the configuration,
// prints it for -print-config, validates it (an error: ExitUsage, the
// errors on stderr), and unless printing, runs the service until ctx ends or SIGINT/SIGTERM
// arrives, logging to stdout. It returns the exit status.
func (p Program[C]) Exec(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(p.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var printConfig bool
	fs.BoolVar(&printConfig, "print-config", false, config.PrintConfigUsage)
	if p.PrintConfig == nil {
		p.PrintConfig = func(w io.Writer, cfg C) error { return config.Print(w, cfg) }
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", p.Name, fs.Args())
		return ExitUsage
	}
	cfg, err := p.load()
	if err == nil && printConfig {
		// Printed before validation: an invalid configuration is shown,
		// then its errors.
		if err := p.PrintConfig(stdout, cfg); err != nil {
			fmt.Fprintf(stderr, "%s: print configuration: %v\n", p.Name, err)
			return ExitUsage
		}
	}
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: invalid configuration:\n%v\n", p.Name, err)
		return ExitUsage
	}
	if printConfig {
		return ExitOK
	}
	log, err := obs.NewLogger(stdout, p.Name, p.LogLevel(cfg))
	if err != nil {
		fmt.Fprintf(stderr, "%s: NOTIFLOW_LOG_LEVEL: %v\n", p.Name, err)
		return ExitUsage
	}
	if p.GCPercent != nil {
		SetGCPercent(p.GCPercent(cfg))
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info(p.Name+" starting", "config", cfg)
	if err := p.Run(ctx, cfg, log); err != nil {
		log.Error(p.Name+" failed", "err", err)
		return ExitFailed
	}
	log.Info(p.Name + " stopped")
	return ExitOK
}

func (p Program[C]) load() (C, error) {
	if p.Load != nil {
		return p.Load()
	}
	var cfg C
	if err := config.Load(&cfg); err != nil {
		return cfg, fmt.Errorf("load configuration: %w", err)
	}
	return cfg, nil
}

// SetGCPercent sets the garbage-collection target to percent unless the
// GOGC environment variable is set (which then wins) or percent is not
// positive (Go's default stays).
func SetGCPercent(percent int) {
	if _, set := os.LookupEnv("GOGC"); !set && percent > 0 {
		debug.SetGCPercent(percent)
	}
}

// Command dispatcher is notiflow's dispatcher: it consumes due
// notifications, deduplicates and rate-limits them in Redis, delivers them
// (webhook, inbox, sim) and publishes one result per notification.
// Configuration and behaviour: README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	libconfig "github.com/notiflow/notiflow/lib/config"
	"github.com/notiflow/notiflow/lib/obs"
	"github.com/notiflow/notiflow/services/dispatcher/internal/config"
	"github.com/notiflow/notiflow/services/dispatcher/internal/service"
)

func main() {
	printConfig := flag.Bool("print-config", false, libconfig.PrintConfigUsage)
	flag.Parse()
	var cfg config.Config
	var printTo io.Writer // stdout with -print-config
	if *printConfig {
		printTo = os.Stdout
	}
	if err := libconfig.LoadChecked(&cfg, printTo); err != nil {
		fmt.Fprintf(os.Stderr, "dispatcher: invalid configuration:\n%v\n", err)
		os.Exit(2)
	}
	if *printConfig {
		return
	}
	log, err := obs.NewLogger(os.Stdout, "dispatcher", cfg.LogLevel)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dispatcher: NOTIFLOW_LOG_LEVEL: %v\n", err)
		os.Exit(2)
	}
	if _, set := os.LookupEnv("GOGC"); !set && cfg.GCPercent > 0 {
		debug.SetGCPercent(cfg.GCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err = run(ctx, cfg, log)
	stop()
	if err != nil {
		log.Error("dispatcher failed", "err", err)
		os.Exit(1)
	}
	log.Info("dispatcher stopped")
}

// run builds the dispatcher and runs it until ctx ends (see service.Run
// for the shutdown order).
func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	log.Info("dispatcher starting", "config", cfg)
	svc, err := service.New(ctx, cfg, log, nil)
	if err != nil {
		return err
	}
	return svc.Run(ctx, nil)
}

// Command notiflow-bench drives notiflow end to end on this machine: it
// starts the local dependencies and the three services as real processes,
// triggers benchmark runs through the scheduler's admin endpoint and prints
// their reports.
//
//	notiflow-bench run      one benchmark (make bench)
//	notiflow-bench compare  naive vs tuned configuration (make bench-compare)
//	notiflow-bench demo     services + sample targets + a benchmark, until Ctrl-C (make demo)
//	notiflow-bench inbox    the in-app inbox read benchmark against a real sink (make bench-inbox)
//	notiflow-bench receive  the webhook receiver a run on channel webhook starts as its own process
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: notiflow-bench run|compare|demo|inbox|receive [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "run":
		err = cmdRun(ctx, os.Args[2:])
	case "compare":
		err = cmdCompare(ctx, os.Args[2:])
	case "demo":
		err = cmdDemo(ctx, os.Args[2:])
	case "inbox":
		err = cmdInbox(ctx, os.Args[2:])
	case "receive":
		err = cmdReceive(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want run, compare, demo, inbox or receive", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "notiflow-bench:", err)
		os.Exit(1)
	}
}

package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/notiflow/notiflow/bench/harness"
)

// cmdCompare runs the naive configuration (partition-ordered dispatcher,
// one INSERT and one commit per record in the sink) and the tuned default
// one after the other on the same machine and prints both and the ratio.
func cmdCompare(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	var o options
	o.register(fs)
	out := fs.String("out", "bench/results/compare-latest.json", "where to write both reports (JSON)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	root, err := harness.Root()
	if err != nil {
		return err
	}
	naiveOpts := o
	naiveOpts.Ordering, naiveOpts.SinkNaive = "partition", true
	naiveOpts.Floor = false // the floor is the design's, measured with the tuned run
	if o.Profile != "" {
		naiveOpts.Profile, o.Profile = filepath.Join(o.Profile, "naive"), filepath.Join(o.Profile, "tuned")
	}
	fmt.Println("== naive configuration: partition-ordered dispatcher, per-record sink")
	naive, err := benchmark(ctx, root, naiveOpts)
	if err != nil {
		return fmt.Errorf("naive run: %w", err)
	}
	fmt.Println("== tuned configuration: the defaults")
	tuned, err := benchmark(ctx, root, o)
	if err != nil {
		return fmt.Errorf("tuned run: %w", err)
	}
	printReport("naive", naive)
	printReport("tuned", tuned)
	ratio := 0.0
	if n := naive.Run.Report.MsgsPerSecond; n > 0 {
		ratio = tuned.Run.Report.MsgsPerSecond / n
	}
	fmt.Printf("\ntuned / naive = %.1fx (%.0f vs %.0f notifications/s)\n", ratio, tuned.Run.Report.MsgsPerSecond, naive.Run.Report.MsgsPerSecond)
	return writeJSON(outPath(root, *out), map[string]any{"naive": naive, "tuned": tuned, "ratio": ratio})
}

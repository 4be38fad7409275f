package main

import (
	"context"
	"fmt"
	"time"

	"github.com/notiflow/notiflow/bench/harness"
)

// costInterval is how often the run window's CPU and row counters are
// snapshot: the run window's end is late by at most this much.
const costInterval = 100 * time.Millisecond

// recordCosts snapshots costs at due (the run window's start) and then
// every costInterval until ctx ends.
func recordCosts(ctx context.Context, costs *harness.CostRecorder, due time.Time) {
	t := time.NewTimer(time.Until(due))
	select {
	case <-ctx.Done():
		t.Stop()
		return
	case <-t.C:
	}
	costs.Take(ctx)
	costs.Record(ctx, costInterval)
}

// runCost computes the cost of a finished run: setup from begin to the due
// time, the run window from the due time to the last notification
// persisted (the report's totalSec after it). A MariaDB read that failed
// is printed; the CPU figures stand without it.
func runCost(costs *harness.CostRecorder, begin harness.CostSnapshot, run *harness.Run) *harness.Cost {
	due, ok1 := costs.At(run.DueAt)
	end, ok2 := costs.At(run.DueAt.Add(time.Duration(run.Report.TotalSec * float64(time.Second))))
	if !ok1 || !ok2 {
		fmt.Println("cost: no snapshot after the run window; cost not reported")
		return nil
	}
	if err := costs.Err(); err != nil {
		fmt.Printf("cost: %v\n", err)
	}
	if late := due.At.Sub(run.DueAt); late > 2*costInterval {
		fmt.Printf("cost: the run window's first snapshot is %s after the due time (the start answered late); its CPU counts as setup\n", late.Round(time.Millisecond))
	}
	c := harness.ComputeCost(begin, due, end, run.Report.Eligible)
	return &c
}

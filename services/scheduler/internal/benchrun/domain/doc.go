// Package domain holds a benchmark run's model: its parameters and their
// validation, its statuses, the progress counters, and the report computed
// from what the pipeline stored (latency percentiles, throughput per stage,
// lost and duplicate occurrences, the series for the chart). No I/O.
package domain

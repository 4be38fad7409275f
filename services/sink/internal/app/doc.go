// Package app is the sink's use case: turn batches of dispatch results into
// notification rows, write them in one statement, isolate rows the database
// refuses and send those to the dead-letter topic. It also holds the naive
// one-row-per-record handler the benchmarks compare against.
package app

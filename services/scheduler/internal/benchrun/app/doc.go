// Package app runs benchmarks: Service.Start validates a request, records
// the run, creates its targets and hands the run to Service.Run, which
// watches it in the background (one watcher per run, in the replica that
// accepted it) until it is done, stalls, is cancelled or the process stops.
package app

// Package benchrun is the end-to-end benchmark of notiflow, hosted by the
// scheduler: POST /admin/benchmarks creates a run's targets (all due at one
// instant, the "09:00 fan-out"), the real pipeline processes them like any
// other, and a watcher in the accepting replica samples progress until every
// notification is persisted, then computes and stores the report.
//
//	domain    runs, parameters, progress, the report and its maths (no I/O)
//	app       the service: start, cancel, list, and the per-run watcher
//	adapters  MySQL (benchmark_runs; the sink's rows through the sink's
//	          package notifications), Redis (simulated sends, lib/simsend),
//	          Kafka (consumer lag)
//	ports     the admin HTTP routes, the admin page and its SVG chart
//
// The benchmark owns only its benchmark_runs table. A run's targets and
// outbox rows are the scheduler's: the service creates, counts and
// deletes them through the scheduler's application layer (app.Runs), on
// the code path of the API's bulk create, so a benchmark measures what
// users run.
package benchrun

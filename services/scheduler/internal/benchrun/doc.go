// Package benchrun is the end-to-end benchmark of notiflow, hosted by the
// scheduler: POST /admin/benchmarks creates a run's targets (all due at one
// instant, the "09:00 fan-out"), the real pipeline processes them like any
// other, and a watcher in the accepting replica samples progress until every
// notification is persisted, then computes and stores the report.
//
//	domain    runs, parameters, progress, the report and its maths (no I/O)
//	app       the service: start, cancel, list, and the per-run watcher
//	adapters  MySQL (benchmark_runs, targets, counts), Redis (simulated
//	          sends), Kafka (consumer lag)
//	ports     the admin HTTP routes, the admin page and its SVG chart
package benchrun

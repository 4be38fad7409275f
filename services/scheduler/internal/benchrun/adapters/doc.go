// Package adapters connects benchmark runs to what they observe: MySQL
// (the benchmark_runs table; the sink's notifications table through its
// owner, package notifications), Redis (the simulated provider's send
// counts, lib/simsend) and Kafka (consumer group lag). The run's targets and
// outbox rows are the scheduler's: the service reaches them through the
// scheduler's app.Runs.
package adapters

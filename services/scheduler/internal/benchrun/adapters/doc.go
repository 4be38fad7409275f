// Package adapters connects benchmark runs to what they observe: MySQL
// (the benchmark_runs table, the run's targets, the outbox and the sink's
// notifications table), Redis (the simulated provider's send counts) and
// Kafka (consumer group lag).
package adapters

// Package app is the scheduler's application layer: the leader lease on
// the redsync mutex, the claim loop that turns due targets into outbox rows,
// the relay that publishes the outbox to Kafka, the cron-driven Scheduler
// tying them together with an ordered shutdown, and the Targets service the
// HTTP API calls. The claim and relay algorithm as a whole:
// services/scheduler/README.md ("How a due target becomes a Kafka record").
package app

// Package harness runs the three notiflow services as real processes
// against the local Kafka, MariaDB and Redis, for the end-to-end benchmark,
// the demo and the fault-injection suite: it builds the binaries, starts,
// kills and restarts processes, gives each run its own database, topics,
// consumer groups and Redis prefix, and talks to the scheduler's admin API.
// The webhook receiver that records every call is lib/testkit's Receiver.
package harness

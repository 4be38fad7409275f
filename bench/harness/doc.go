// Package harness runs the three notiflow services as real processes
// against the local Kafka, MariaDB and Redis, for the end-to-end benchmark,
// the demo and the fault-injection suite: it builds the binaries, starts,
// kills and restarts processes, gives each run its own database, topics,
// consumer groups and Redis prefix, and talks to the scheduler's admin API.
// The demo's and the fault-injection suite's webhook receiver, which records
// every call, is lib/testkit's Receiver; the webhook benchmark's is
// bench/receiver, run as a process of its own (StartReceiver).
package harness

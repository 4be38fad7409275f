// Package chaos is notiflow's fault-injection suite: it runs the three
// services as real processes against the real Kafka, MariaDB and Redis,
// drives 20,000 notifications per scenario (webhook to a recording receiver
// plus inbox), injects a fault (SIGKILL, SIGTERM, stopped database, stopped
// Redis, restarted broker, failing receiver, poison records) and then checks
// the outcome from MySQL, Kafka and the receiver directly, never from the
// services' own counters.
//
// `make test` runs the trimmed set (scenarios 1, 2 and 9); `make test-chaos`
// runs every scenario (NOTIFLOW_CHAOS=all; a comma-separated list of
// numbers runs those) and writes bench/results/chaos-latest.json.
package chaos

// Package kafkax is notiflow's Kafka plumbing on segmentio/kafka-go: the
// shared Kafka settings, idempotent topic creation, a producer configured for
// durability and key order, the record headers of the event contract, and
// the dead-letter publisher.
package kafkax

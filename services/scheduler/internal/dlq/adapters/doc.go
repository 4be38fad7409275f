// Package adapters holds the dead-letter redrive's adapters: the DLQ
// topic read by time window (Kafka), and the redrive marks (Redis).
package adapters

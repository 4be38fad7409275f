// Package adapters connects the dispatcher to the outside world: Redis
// (deduplication markers, rate limits and simulated-send counts, through a
// pipelining auto-batcher), the channel providers (webhook with retries,
// circuit breakers and an SSRF guard; inbox; sim) and Kafka (results).
package adapters

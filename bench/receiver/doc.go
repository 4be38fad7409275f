// Package receiver is the webhook endpoint the webhook benchmark delivers
// to (`make bench CHANNEL=webhook`): a real HTTP server, run as a process
// of its own (notiflow-bench receive) so that its CPU is measured apart
// from the services. It answers after a set delay, the provider latency
// the sim channel simulates, and counts what a receiver must check: the
// Idempotency-Key of every call, duplicates of a key already answered
// 2xx, and the Standard Webhooks signature (webhook-id, webhook-timestamp,
// webhook-signature), verified with the reference library of the
// specification, not with the code that signs.
package receiver

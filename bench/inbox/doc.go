// Package inbox is the in-app inbox benchmark's harness (make bench-inbox):
// Spec describes a notifications table with one heavy recipient, Produce
// writes it as NotificationDispatched records to the sink's results topic
// (the sink persists them through its real write path), and Load drives one
// HTTP request at a constant rate with vegeta and summarises the latencies.
package inbox

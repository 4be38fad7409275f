// Package ports connects the sink to Kafka (it decodes
// NotificationDispatched records and runs the consumer runtime in batched or
// naive mode) and serves the notifications table's read API over HTTP.
package ports

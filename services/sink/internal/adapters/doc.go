// Package adapters holds the sink's MySQL store (the notifications table,
// its migrations and the idempotent batch upsert).
package adapters

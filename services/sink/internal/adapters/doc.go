// Package adapters holds the sink's MySQL store: the idempotent batch
// upsert into the notifications table, whose definition (the migrations)
// package notifications owns.
package adapters

// Package notifications owns the definition of the sink's notifications
// table, one row per occurrence delivered (or given up), keyed by the
// occurrence (target_id, occurrence_at): its migrations, which the sink
// applies at start (with inbox_entries, one row per inbox notification
// holding its arrival and read state, the inbox_unread counter and the
// triggers that keep it); the read API's queries (Reader: delivery status, the in-app
// inbox, its unread count and read state); and the reads and deletes of
// one benchmark run's rows, which the scheduler's benchmark uses. The
// sink's writes (the idempotent batch upsert) stay in the sink's internal
// adapters.
package notifications

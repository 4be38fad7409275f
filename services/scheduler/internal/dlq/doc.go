// Package dlq reads the dead-letter topic (notify.dlq.v1) by time window
// and redrives dead letters to the topics they came from, for the
// scheduler's admin routes GET /admin/dlq and POST /admin/dlq/redrive.
//
// The dead letters' format is lib/kafkax's (DeadLetter writes it,
// ParseDeadLetter reads it, RedriveHeaders writes a redrive). This package
// holds the rules: which records a window and filters select (Filter), and
// which of them may be redriven (Decide):
//
//   - a record whose redrive count has reached the limit
//     (NOTIFLOW_DLQ_MAX_REDRIVES) is skipped: a record that keeps failing
//     comes back with its count raised by one each time, so it stops;
//
//   - a record already redriven (its mark, written in Redis before it is
//     produced, is there) is skipped: two redrives of one window produce
//     each record once. Should the mark expire or be lost, the second copy
//     meets the dispatcher's dedup (a DELIVERED notification is answered
//     DUPLICATE, not sent again);
//
//   - a record whose value was truncated to fit the DLQ, or that does not
//     name its source topic, is skipped: it cannot be rebuilt.
//
//     adapters  Kafka (the window's offsets, reading it, producing back),
//     Redis (the redrive marks)
//     ports     the admin HTTP routes
package dlq

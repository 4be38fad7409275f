package notifications

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// seedChunk is the most rows one seeding INSERT writes.
const seedChunk = 1000

// Seed describes synthetic inbox rows for load tests and demos: Count rows
// of channel inbox for RecipientID, targets FirstTarget.., arriving one
// microsecond apart from Start (persisted_at; occurrence_at and due_at
// equal it), all unread. IDs are "<IDPrefix><target id>".
type Seed struct {
	RecipientID string
	FirstTarget uint64
	Count       int
	Start       time.Time
	IDPrefix    string
}

// SeedInbox writes s's rows, seedChunk per transaction, into the same
// tables the sink writes: notifications and inbox_entries (the unread
// counter follows by its triggers). It fails on a row that exists already.
// It is meant for load tests of the read API, not for production data.
func SeedInbox(ctx context.Context, db *sql.DB, s Seed) error {
	const cols = `INSERT INTO notifications (notification_id, target_id, occurrence_at, recipient_id, sequence, channel,
		template_id, status, attempts, provider_code, error, body, due_at, dispatched_at, persisted_at, writer_schema) VALUES `
	const entryCols = `INSERT INTO inbox_entries (target_id, occurrence_at, recipient_id, persisted_at) VALUES `
	for from := 0; from < s.Count; from += seedChunk {
		n := min(seedChunk, s.Count-from)
		args := make([]any, 0, n*12)
		entries := make([]any, 0, n*4)
		for i := from; i < from+n; i++ {
			at := s.Start.Add(time.Duration(i) * time.Microsecond).UTC()
			target := s.FirstTarget + uint64(i)
			args = append(args, fmt.Sprintf("%s%d", s.IDPrefix, target), target, at, s.RecipientID, uint64(i), ChannelInbox,
				fmt.Sprintf("seeded notification %d", i), at, at, at, WriterSchema)
			entries = append(entries, target, at, s.RecipientID, at)
		}
		q := cols + strings.TrimSuffix(strings.Repeat("(?,?,?,?,?,?,'seed','delivered',1,0,'',?,?,?,?,?),", n), ",")
		eq := entryCols + strings.TrimSuffix(strings.Repeat("(?,?,?,?),", n), ",")
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, eq, entries...)
			return err
		}); err != nil {
			return fmt.Errorf("seed inbox rows %d-%d of %s: %w", from, from+n-1, s.RecipientID, err)
		}
	}
	return nil
}

// inTx runs fn in a transaction and commits it; fn's error rolls it back.
func inTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

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

// SeedInbox writes s's rows, seedChunk per statement, through the same
// table the sink writes (the unread counter follows by its triggers). It
// fails on a row that exists already. It is meant for load tests of the
// read API, not for production data.
func SeedInbox(ctx context.Context, db *sql.DB, s Seed) error {
	const cols = `INSERT INTO notifications (notification_id, target_id, occurrence_at, recipient_id, sequence, channel,
		template_id, status, attempts, provider_code, error, body, due_at, dispatched_at, persisted_at) VALUES `
	for from := 0; from < s.Count; from += seedChunk {
		n := min(seedChunk, s.Count-from)
		args := make([]any, 0, n*11)
		for i := from; i < from+n; i++ {
			at := s.Start.Add(time.Duration(i) * time.Microsecond).UTC()
			target := s.FirstTarget + uint64(i)
			args = append(args, fmt.Sprintf("%s%d", s.IDPrefix, target), target, at, s.RecipientID, uint64(i), ChannelInbox,
				fmt.Sprintf("seeded notification %d", i), at, at, at)
		}
		tuple := "(?,?,?,?,?,?,'seed','delivered',1,0,'',?,?,?,?)"
		q := cols + strings.TrimSuffix(strings.Repeat(tuple+",", n), ",")
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("seed inbox rows %d-%d of %s: %w", from, from+n-1, s.RecipientID, err)
		}
	}
	return nil
}

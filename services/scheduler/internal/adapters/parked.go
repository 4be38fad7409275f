package adapters

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/notiflow/notiflow/services/scheduler/internal/app"
)

// maxReasonLen is the width of outbox_parked.reason.
const maxReasonLen = 1024

// Park records outbox rows the relay gives up on, with their reasons (cut
// to 1024 bytes). Parking a row again keeps its first record.
func (s *MySQLStore) Park(ctx context.Context, parked []app.Parked) error {
	if len(parked) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString(`INSERT IGNORE INTO outbox_parked (outbox_id, notification_id, target_id, recipient_id, occurrence_at, reason, parked_at) VALUES `)
	placeholders(&b, len(parked), 7)
	args := make([]any, 0, 7*len(parked))
	for _, p := range parked {
		n := &p.Note
		args = append(args, n.Sequence, n.ID, n.TargetID, n.RecipientID, n.OccurrenceAt, cut(p.Reason, maxReasonLen), p.At)
	}
	if _, err := s.db.ExecContext(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("park %d outbox rows: %w", len(parked), err)
	}
	return nil
}

// ListParked returns up to limit parked rows with an outbox id above
// afterID, in id order; each Note carries Sequence (the outbox id), ID,
// TargetID, RecipientID and OccurrenceAt.
func (s *MySQLStore) ListParked(ctx context.Context, afterID uint64, limit int) ([]app.Parked, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT outbox_id, notification_id, target_id, recipient_id, occurrence_at, reason, parked_at
		FROM outbox_parked WHERE outbox_id > ? ORDER BY outbox_id LIMIT ?`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list parked outbox rows: %w", err)
	}
	defer rows.Close()
	var out []app.Parked
	for rows.Next() {
		var p app.Parked
		n := &p.Note
		if err := rows.Scan(&n.Sequence, &n.ID, &n.TargetID, &n.RecipientID, &n.OccurrenceAt, &p.Reason, &p.At); err != nil {
			return nil, fmt.Errorf("read parked outbox row: %w", err)
		}
		n.OccurrenceAt, p.At = n.OccurrenceAt.UTC(), p.At.UTC()
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list parked outbox rows: %w", err)
	}
	return out, nil
}

// cut returns s cut to at most n bytes, on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

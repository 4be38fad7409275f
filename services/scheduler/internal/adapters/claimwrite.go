package adapters

import (
	"context"
	"fmt"
	"strings"
	"time"

	"database/sql"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// groupedUpdateMax is the most distinct (status, next_run_at) pairs a claim
// writes with one plain UPDATE each; beyond it, one UPDATE with CASE.
const groupedUpdateMax = 8

const outboxColumns = 4

// insertOutbox writes one row per occurrence of the advances with
// multi-row INSERTs; an occurrence already in the outbox is skipped. It
// returns the number of rows written.
func insertOutbox(ctx context.Context, tx *sql.Tx, due []domain.Target, advances []domain.Advance, now time.Time) (int, error) {
	type occ struct {
		target int64
		at     time.Time
		runID  sql.NullString
	}
	occs := make([]occ, 0, len(due))
	for i, a := range advances {
		for _, at := range a.Occurrences {
			occs = append(occs, occ{due[i].ID, at, nullString(due[i].RunID)})
		}
	}
	inserted := 0
	for start := 0; start < len(occs); start += insertChunk {
		chunk := occs[start:min(start+insertChunk, len(occs))]
		var b strings.Builder
		b.Grow(100 + len(chunk)*(2*outboxColumns+3))
		b.WriteString(`INSERT INTO outbox (target_id, occurrence_at, run_id, created_at) VALUES `)
		placeholders(&b, len(chunk), outboxColumns)
		// id = id is a no-op: a duplicate occurrence keeps its first row.
		b.WriteString(` ON DUPLICATE KEY UPDATE id = id`)
		args := make([]any, 0, len(chunk)*outboxColumns)
		for _, o := range chunk {
			args = append(args, o.target, o.at, o.runID, now)
		}
		res, err := tx.ExecContext(ctx, b.String(), args...)
		if err != nil {
			return inserted, fmt.Errorf("claim: insert %d outbox rows: %w", len(chunk), err)
		}
		// With ON DUPLICATE KEY UPDATE an inserted row counts 1 and an
		// unchanged duplicate 0.
		n, err := res.RowsAffected()
		if err != nil {
			return inserted, fmt.Errorf("claim: insert outbox rows: %w", err)
		}
		inserted += int(n)
	}
	return inserted, nil
}

type advanceKey struct {
	status string
	nextUS int64 // next_run_at in Unix microseconds; 0 keeps the column
}

// advanceTargets stores the next state of each claimed target with as few
// statements as it can: one UPDATE per distinct (status, next_run_at), the
// usual case being a single "done" for a batch of one-shots, or one UPDATE
// with CASE when the next times differ (cron targets in many zones).
// Targets whose schedule no longer parses are paused.
func advanceTargets(ctx context.Context, tx *sql.Tx, due []domain.Target, adv []domain.Advance, broken []int64, now time.Time) error {
	groups := map[advanceKey][]int64{}
	var order []advanceKey
	add := func(k advanceKey, id int64) {
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], id)
	}
	for i, t := range due {
		k := advanceKey{status: string(adv[i].Status)}
		if !adv[i].NextRunAt.Equal(t.NextRunAt) {
			k.nextUS = adv[i].NextRunAt.UnixMicro()
		}
		// One-shots keep next_run_at: a batch of them is one "done" group
		// whatever their due times.
		add(k, t.ID)
	}
	for _, id := range broken {
		add(advanceKey{status: string(domain.StatusPaused)}, id)
	}
	if len(order) <= groupedUpdateMax {
		for _, k := range order {
			ids := groups[k]
			var b strings.Builder
			args := make([]any, 0, len(ids)+3)
			if k.nextUS == 0 {
				b.WriteString(`UPDATE notification_targets SET status = ?, updated_at = ? WHERE id IN `)
				args = append(args, k.status, now)
			} else {
				b.WriteString(`UPDATE notification_targets SET status = ?, next_run_at = ?, updated_at = ? WHERE id IN `)
				args = append(args, k.status, time.UnixMicro(k.nextUS).UTC(), now)
			}
			inList(&b, len(ids))
			for _, id := range ids {
				args = append(args, id)
			}
			if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
				return fmt.Errorf("claim: advance %d targets: %w", len(ids), err)
			}
		}
		return nil
	}
	// Many distinct next times: one UPDATE with a CASE per column.
	n := len(due) + len(broken)
	var b strings.Builder
	args := make([]any, 0, 5*n+1)
	b.WriteString(`UPDATE notification_targets SET next_run_at = CASE id`)
	for i, t := range due {
		b.WriteString(` WHEN ? THEN ?`)
		args = append(args, t.ID, adv[i].NextRunAt)
	}
	b.WriteString(` ELSE next_run_at END, status = CASE id`)
	for i, t := range due {
		b.WriteString(` WHEN ? THEN ?`)
		args = append(args, t.ID, string(adv[i].Status))
	}
	for _, id := range broken {
		b.WriteString(` WHEN ? THEN ?`)
		args = append(args, id, string(domain.StatusPaused))
	}
	b.WriteString(` ELSE status END, updated_at = ? WHERE id IN `)
	args = append(args, now)
	inList(&b, n)
	for _, t := range due {
		args = append(args, t.ID)
	}
	for _, id := range broken {
		args = append(args, id)
	}
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("claim: advance %d targets: %w", n, err)
	}
	return nil
}

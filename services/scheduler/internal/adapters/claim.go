package adapters

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"database/sql"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

var _ app.ClaimTx = (*Claim)(nil)

// ClaimDue claims up to limit active targets due at now, oldest
// next_run_at first, in one transaction: BeginClaim then Finish. When ctx
// ends the transaction rolls back and nothing is claimed.
func (s *MySQLStore) ClaimDue(ctx context.Context, now time.Time, limit int, planner domain.Planner) (domain.ClaimResult, error) {
	c, err := s.BeginClaim(ctx, now, limit, planner, domain.ClaimCursor{})
	if err != nil || c == nil {
		return domain.ClaimResult{}, err
	}
	return c.Finish(ctx)
}

// NextDue returns the due time of the due queue's (target_due's) first
// entry due after the instant after, or ok false when there is none. It
// is one read of the queue's key; the scheduler calls it after each scan
// to wake at the next due time rather than at its next tick.
func (s *MySQLStore) NextDue(ctx context.Context, after time.Time) (at time.Time, ok bool, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT next_run_at FROM target_due WHERE next_run_at > ? ORDER BY next_run_at, target_id LIMIT 1`, after).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read the next due time: %w", err)
	}
	return at.UTC(), true, nil
}

// Claim is a claim transaction between its two steps (an app.ClaimTx). It
// is not safe for concurrent use; Finish or Rollback must be called
// exactly once.
type Claim struct {
	s        *MySQLStore
	tx       *sql.Tx
	now      time.Time
	due      []domain.Target
	advances []domain.Advance
	broken   int
	taken    int // due-queue entries taken, stale ones included
	last     domain.ClaimCursor
}

// Cursor is the position of the last target the claim took.
func (c *Claim) Cursor() domain.ClaimCursor { return c.last }

// Targets is the number of due-queue entries the claim took: its due
// targets plus entries it dropped because they no longer matched their
// target (a batch is full when this reaches its limit).
func (c *Claim) Targets() int { return c.taken }

// BeginClaim opens a claim transaction and runs its first step: it takes
// up to limit entries of the due queue (table target_due) at or before
// now, in (next_run_at, target_id) order after the cursor from (the Cursor
// of the previous claim of the same scan, or the zero cursor), FOR UPDATE
// SKIP LOCKED (so claims in flight at the same time, and entries an API
// request has locked, are skipped), and deletes them.
//
// A one-shot's entry is all its claim needs (due time, run): the claim
// neither reads nor updates its target, which the store reports as done
// from then on (its queue entry is gone) and SettleOneShots later marks
// done. Every writer of a target's status keeps the queue in step in its
// own transaction and locks the target's entry first (see UpdateTarget),
// so the entry's lock is what serialises a one-shot's claim with the API.
//
// The other entries' targets (entries with one_shot = 0: cron targets,
// or any entry written without the flag) are locked too, FOR UPDATE SKIP
// LOCKED; an entry whose target another transaction holds is kept for a
// later claim. The
// planner computes the occurrences and next states of those that are
// active and due; the claim advances them with batched UPDATEs and queues
// the next entry of those still active. Such an entry that no longer
// matches its target (target gone, not active, or due at another time) is
// dropped, and an active target due later gets its right entry.
//
// It returns a nil Claim when no entry is due. The transaction stays open
// until Finish or Rollback; ctx must stay alive until then.
//
// Claims may be begun while another one is being finished: that overlap is
// what lets a scan use two database connections (see app.Scheduler).
func (s *MySQLStore) BeginClaim(ctx context.Context, now time.Time, limit int, planner domain.Planner, from domain.ClaimCursor) (app.ClaimTx, error) {
	// READ COMMITTED: the locking read takes record locks only, no gap
	// locks that would block the API inserting new due targets.
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, fmt.Errorf("claim: begin: %w", err)
	}
	c := &Claim{s: s, tx: tx, now: now}
	if err := c.begin(ctx, limit, planner, from); err != nil || c.taken == 0 {
		_ = tx.Rollback()
		return nil, err
	}
	return c, nil
}

func (c *Claim) begin(ctx context.Context, limit int, planner domain.Planner, from domain.ClaimCursor) error {
	entries, err := c.lockDue(ctx, limit, from)
	if err != nil || len(entries) == 0 {
		return err
	}
	c.taken = len(entries)
	c.last = domain.ClaimCursor{NextRunAt: entries[len(entries)-1].at, ID: entries[len(entries)-1].id}
	// A one-shot's entry is all its claim needs; the other entries'
	// targets are locked and read.
	var others []dueEntry
	for _, e := range entries {
		if !e.oneShot {
			others = append(others, e)
		}
	}
	rows, err := c.lockTargets(ctx, others)
	if err != nil {
		return err
	}
	// Sort the entries: due targets, entries to drop (their target is no
	// longer active, gone, or due at another time, which gets its own
	// entry) and entries to keep (their target is locked by another
	// transaction, such as an API request; a later claim takes them).
	c.due = make([]domain.Target, 0, len(entries))
	var (
		broken, missing []int64
		drop            = make([]any, 0, len(entries))
		requeue         []dueEntry
		read            []int // indexes in c.due of the targets read
	)
	for _, e := range entries {
		if e.oneShot {
			drop = append(drop, e.id)
			c.due = append(c.due, domain.Target{ID: e.id, Schedule: domain.OneShot(e.at), NextRunAt: e.at,
				Status: domain.StatusActive, RunID: e.runID})
			continue
		}
		r, ok := rows[e.id]
		if !ok {
			missing = append(missing, e.id)
			continue
		}
		drop = append(drop, e.id)
		if r.Status != string(domain.StatusActive) {
			continue
		}
		if !r.NextRunAt.Equal(e.at) && r.NextRunAt.After(c.now) {
			requeue = append(requeue, r.queueEntry())
			continue
		}
		t, err := c.s.toDomain(r)
		if err != nil {
			broken = append(broken, r.ID)
			continue
		}
		read = append(read, len(c.due))
		c.due = append(c.due, t)
	}
	gone, err := c.gone(ctx, missing)
	if err != nil {
		return err
	}
	drop = append(drop, gone...)
	if err := c.dequeue(ctx, entries[0].at, c.last.NextRunAt, drop); err != nil {
		return err
	}
	c.broken = len(broken)
	c.advances = planner.Plan(c.due, c.now)
	// Only the targets read are advanced here; a one-shot claimed from its
	// entry alone is settled later (SettleOneShots).
	advDue := make([]domain.Target, len(read))
	advances := make([]domain.Advance, len(read))
	for j, i := range read {
		advDue[j], advances[j] = c.due[i], c.advances[i]
		if a := c.advances[i]; a.Status == domain.StatusActive {
			t := c.due[i]
			t.NextRunAt = a.NextRunAt
			requeue = append(requeue, queueEntry(t, t.ID))
		}
	}
	if len(advDue)+len(broken) > 0 {
		if err := advanceTargets(ctx, c.tx, advDue, advances, broken, c.now); err != nil {
			return err
		}
	}
	if err := enqueueDue(ctx, c.tx, requeue); err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	return nil
}

// lockDue locks up to limit due-queue entries at or before now, after the
// cursor from, in key order, skipping entries other transactions hold.
func (c *Claim) lockDue(ctx context.Context, limit int, from domain.ClaimCursor) ([]dueEntry, error) {
	q := `SELECT next_run_at, target_id, one_shot, run_id FROM target_due WHERE next_run_at <= ?`
	args := []any{c.now}
	if !from.IsZero() {
		q += ` AND (next_run_at > ? OR (next_run_at = ? AND target_id > ?))`
		args = append(args, from.NextRunAt, from.NextRunAt, from.ID)
	}
	rows, err := c.tx.QueryContext(ctx, q+` ORDER BY next_run_at, target_id LIMIT ? FOR UPDATE SKIP LOCKED`, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("claim: select due targets: %w", err)
	}
	defer rows.Close()
	entries := make([]dueEntry, 0, limit)
	for rows.Next() {
		var (
			e     dueEntry
			runID sql.NullString
		)
		if err := rows.Scan(&e.at, &e.id, &e.oneShot, &runID); err != nil {
			return nil, fmt.Errorf("claim: read due target: %w", err)
		}
		e.runID = runID.String
		entries = append(entries, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: read due targets: %w", err)
	}
	return entries, nil
}

// lockTargets locks the targets of entries, skipping those other
// transactions hold, and returns them by id with what planning needs (the
// relay reads the rest).
func (c *Claim) lockTargets(ctx context.Context, entries []dueEntry) (map[int64]*targetRow, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	var b strings.Builder
	b.WriteString(`SELECT id, schedule_kind, due_at, cron_expr, time_zone, next_run_at, status, run_id
		FROM notification_targets WHERE id IN `)
	inList(&b, len(entries))
	b.WriteString(` FOR UPDATE SKIP LOCKED`)
	args := make([]any, len(entries))
	for i, e := range entries {
		args[i] = e.id
	}
	rows, err := c.tx.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("claim: lock due targets: %w", err)
	}
	defer rows.Close()
	out := make(map[int64]*targetRow, len(entries))
	for rows.Next() {
		r := new(targetRow)
		if err := rows.Scan(&r.ID, &r.ScheduleKind, &r.DueAt, &r.CronExpr, &r.TimeZone, &r.NextRunAt, &r.Status, &r.RunID); err != nil {
			return nil, fmt.Errorf("claim: read due target: %w", err)
		}
		out[r.ID] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: read due targets: %w", err)
	}
	return out, nil
}

// gone returns those of ids (targets a locking read did not return) that
// no longer exist; the others are locked by another transaction.
func (c *Claim) gone(ctx context.Context, ids []int64) ([]any, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var b strings.Builder
	b.WriteString(`SELECT id FROM notification_targets WHERE id IN `)
	inList(&b, len(ids))
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := c.tx.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("claim: look up targets of due entries: %w", err)
	}
	defer rows.Close()
	exists := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("claim: look up targets of due entries: %w", err)
		}
		exists[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: look up targets of due entries: %w", err)
	}
	var out []any
	for _, id := range ids {
		if !exists[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

// dequeue deletes the due-queue entries of ids between first and last
// (the claim's key range; entries in it that ids do not name stay).
func (c *Claim) dequeue(ctx context.Context, first, last time.Time, ids []any) error {
	if len(ids) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString(`DELETE FROM target_due WHERE next_run_at BETWEEN ? AND ? AND target_id IN `)
	inList(&b, len(ids))
	if _, err := c.tx.ExecContext(ctx, b.String(), append([]any{first, last}, ids...)...); err != nil {
		return fmt.Errorf("claim: dequeue %d due targets: %w", len(ids), err)
	}
	return nil
}

// Finish runs the claim's second step and commits: it locks the single row
// of outbox_lock, writes one outbox row per occurrence with
// multi-row INSERTs and commits. The unique key (target_id, occurrence_at)
// makes a second outbox row for one occurrence impossible: a duplicate is
// skipped, whoever claims it. On error the claim is rolled back.
//
// The outbox_lock row serialises every outbox writer (several claims
// of this process, a paused former lock holder): rows are inserted and
// committed under it, so outbox rows commit in id order, and a reader that
// holds the row in share mode sees no writer half way (see CommittedUpTo).
// That is what lets the relay keep a plain cursor (see Unpublished).
func (c *Claim) Finish(ctx context.Context) (domain.ClaimResult, error) {
	defer func() { _ = c.tx.Rollback() }() // no-op after Commit
	var res domain.ClaimResult
	var one int
	if err := c.tx.QueryRowContext(ctx, `SELECT id FROM outbox_lock WHERE id = 1 FOR UPDATE`).Scan(&one); err != nil {
		return res, fmt.Errorf("claim: lock the outbox for writing: %w", err)
	}
	inserted, err := insertOutbox(ctx, c.tx, c.due, c.advances, c.now)
	if err != nil {
		return res, err
	}
	if c.s.BeforeClaimCommit != nil {
		if err := c.s.BeforeClaimCommit(ctx); err != nil {
			return res, fmt.Errorf("claim: before commit: %w", err)
		}
	}
	if err := c.tx.Commit(); err != nil {
		return res, fmt.Errorf("claim: commit: %w", err)
	}
	res.Targets = len(c.due) + c.broken
	res.Inserted = inserted
	res.Broken = c.broken
	for _, a := range c.advances {
		if a.Truncated {
			res.Truncated++
		}
	}
	return res, nil
}

// Rollback abandons the claim: its targets stay due.
func (c *Claim) Rollback() { _ = c.tx.Rollback() }

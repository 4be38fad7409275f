package adapters

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

var _ app.ClaimTx = (*Claim)(nil)

// groupedUpdateMax is the most distinct (status, next_run_at) pairs a claim
// writes with one plain UPDATE each; beyond it, one UPDATE with CASE.
const groupedUpdateMax = 8

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
// The other entries' targets (cron, and entries written by a replica
// older than schema 5) are locked too, FOR UPDATE SKIP LOCKED; an entry
// whose target another transaction holds is kept for a later claim. The
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
// of outbox_claim_lock, writes one outbox row per occurrence with
// multi-row INSERTs and commits. The unique key (target_id, occurrence_at)
// makes a second outbox row for one occurrence impossible: a duplicate is
// skipped, whoever claims it. On error the claim is rolled back.
//
// The outbox_claim_lock row serialises every outbox writer (several claims
// of this process, a paused former lock holder): rows are inserted and
// committed under it, so outbox rows commit in id order, and a reader that
// holds the row in share mode sees no writer half way (see CommittedUpTo).
// That is what lets the relay keep a plain cursor (see Unpublished).
func (c *Claim) Finish(ctx context.Context) (domain.ClaimResult, error) {
	defer func() { _ = c.tx.Rollback() }() // no-op after Commit
	var res domain.ClaimResult
	var one int
	if err := c.tx.QueryRowContext(ctx, `SELECT id FROM outbox_claim_lock WHERE id = 1 FOR UPDATE`).Scan(&one); err != nil {
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

// PublishedUpTo returns the relay cursor: every outbox row with an id up
// to it was acknowledged by Kafka.
func (s *MySQLStore) PublishedUpTo(ctx context.Context) (uint64, error) {
	var id uint64
	if err := s.db.QueryRowContext(ctx, `SELECT published_id FROM outbox_relay WHERE id = 1`).Scan(&id); err != nil {
		return 0, fmt.Errorf("read the relay cursor: %w", err)
	}
	return id, nil
}

// CommittedUpTo returns the highest outbox id committed now: every row
// with an id up to it that will ever exist is committed and visible to
// any read that starts after CommittedUpTo returns, whatever the database
// shows of transactions still committing when a read's snapshot is taken.
//
// It holds the outbox_claim_lock row in share mode in a short READ
// COMMITTED transaction while it reads MAX(id). Every outbox writer inserts
// and commits under that row's exclusive lock (see Finish), so while the
// share lock is held no writer is between its first insert and its
// commit, and the MAX(id) statement, whose snapshot is taken after the
// lock is granted, sees every row up to it; a writer that comes after
// draws higher ids (auto-increment values only grow). It waits for a claim
// that is finishing; when ctx ends it returns ctx's error.
func (s *MySQLStore) CommittedUpTo(ctx context.Context) (uint64, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, fmt.Errorf("read the committed outbox end: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var one int
	if err := tx.QueryRowContext(ctx, `SELECT id FROM outbox_claim_lock WHERE id = 1 LOCK IN SHARE MODE`).Scan(&one); err != nil {
		return 0, fmt.Errorf("read the committed outbox end: share the claim lock: %w", err)
	}
	var hi uint64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM outbox`).Scan(&hi); err != nil {
		return 0, fmt.Errorf("read the committed outbox end: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("read the committed outbox end: commit: %w", err)
	}
	return hi, nil
}

// Unpublished returns up to limit outbox rows with afterID < id <= upTo,
// in id order, as notifications (joined with their targets) whose
// Sequence is the outbox id. With upTo from CommittedUpTo, the rows
// returned are all the rows in their id range that will ever exist: a
// cursor moved past them never skips a row.
func (s *MySQLStore) Unpublished(ctx context.Context, afterID, upTo uint64, limit int) ([]domain.Notification, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT o.id, o.target_id, o.occurrence_at, o.run_id, o.created_at,
			t.created_at, t.recipient_id, t.channel, t.webhook_url, t.template_id, t.params
		FROM outbox o JOIN notification_targets t ON t.id = o.target_id
		WHERE o.id > ? AND o.id <= ? ORDER BY o.id LIMIT ?`, afterID, upTo, limit)
	if err != nil {
		return nil, fmt.Errorf("read unpublished outbox rows: %w", err)
	}
	defer rows.Close()
	out := make([]domain.Notification, 0, limit)
	for rows.Next() {
		var (
			n             domain.Notification
			targetCreated time.Time
			ch            string
			url, runID    sql.NullString
		)
		if err := rows.Scan(&n.Sequence, &n.TargetID, &n.OccurrenceAt, &runID, &n.CreatedAt,
			&targetCreated, &n.RecipientID, &ch, &url, &n.TemplateID, &n.Params); err != nil {
			return nil, fmt.Errorf("read unpublished outbox row: %w", err)
		}
		n.ID = domain.NotificationID(n.TargetID, targetCreated, n.OccurrenceAt)
		n.DueAt = n.OccurrenceAt
		n.Channel, n.WebhookURL, n.RunID = domain.Channel(ch), url.String, runID.String
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read unpublished outbox rows: %w", err)
	}
	return out, nil
}

// MarkPublished moves the relay cursor to upTo: every row up to it was
// acknowledged. The cursor never moves back, so a late call from a former
// lock holder is harmless.
func (s *MySQLStore) MarkPublished(ctx context.Context, upTo uint64, at time.Time) error {
	_, err := s.db.ExecContext(ctx, `UPDATE outbox_relay SET published_id = GREATEST(published_id, ?), updated_at = ? WHERE id = 1`, upTo, at)
	if err != nil {
		return fmt.Errorf("mark outbox rows up to %d published: %w", upTo, err)
	}
	return nil
}

// RowIDs returns the ids of the outbox rows with afterID < id <= upTo, in
// order, from a fresh read.
func (s *MySQLStore) RowIDs(ctx context.Context, afterID, upTo uint64) ([]uint64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM outbox WHERE id > ? AND id <= ? ORDER BY id`, afterID, upTo)
	if err != nil {
		return nil, fmt.Errorf("read outbox ids %d..%d: %w", afterID+1, upTo, err)
	}
	defer rows.Close()
	var ids []uint64
	for rows.Next() {
		var id uint64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("read outbox id: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read outbox ids %d..%d: %w", afterID+1, upTo, err)
	}
	return ids, nil
}

// SettleOneShots stores "done" for the one-shots that claims fired from
// their queue entries alone (see BeginClaim), going through the outbox rows
// after the settle cursor (outbox_relay.settled_id), at most limit rows
// per call, and moves the cursor past them. It returns how many targets it
// settled and whether rows after the cursor may remain. A target is
// settled only if it is still an active one-shot due at the row's
// occurrence without a queue entry, so running it twice, or beside a claim,
// is harmless. It reads no row above CommittedUpTo: the cursor never skips
// one.
//
// The candidates are found with a plain (non-locking) read; only their
// target rows are then locked, by one single-table UPDATE per claim time
// in a READ COMMITTED transaction, so settling never holds queue or outbox
// rows that claims and the API write.
func (s *MySQLStore) SettleOneShots(ctx context.Context, limit int) (settled int64, more bool, err error) {
	if limit <= 0 {
		return 0, false, fmt.Errorf("settle one-shots: limit %d, want > 0", limit)
	}
	var from uint64
	if err := s.db.QueryRowContext(ctx, `SELECT settled_id FROM outbox_relay WHERE id = 1`).Scan(&from); err != nil {
		return 0, false, fmt.Errorf("settle one-shots: read the cursor: %w", err)
	}
	end, err := s.CommittedUpTo(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("settle one-shots: %w", err)
	}
	var hi uint64
	err = s.db.QueryRowContext(ctx, `SELECT id FROM outbox WHERE id > ? AND id <= ? ORDER BY id LIMIT 1 OFFSET ?`, from, end, limit-1).Scan(&hi)
	switch {
	case err == nil:
		more = hi < end
	case errors.Is(err, sql.ErrNoRows):
		hi = end
	default:
		return 0, false, fmt.Errorf("settle one-shots: find the window: %w", err)
	}
	if hi <= from {
		return 0, false, nil
	}
	byTime, err := s.unsettled(ctx, from, hi)
	if err != nil {
		return 0, false, err
	}
	if settled, err = s.settle(ctx, byTime); err != nil {
		return 0, false, err
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE outbox_relay SET settled_id = GREATEST(settled_id, ?) WHERE id = 1`, hi); err != nil {
		return settled, false, fmt.Errorf("settle one-shots: move the cursor to %d: %w", hi, err)
	}
	return settled, more, nil
}

// unsettled returns, by claim time, the targets of the outbox rows from+1
// to hi that are active one-shots due at the row's occurrence without a
// queue entry (a consistent read: no locks).
func (s *MySQLStore) unsettled(ctx context.Context, from, hi uint64) (map[time.Time][]any, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT o.target_id, o.created_at FROM outbox o
		JOIN notification_targets t ON t.id = o.target_id
		WHERE o.id > ? AND o.id <= ? AND t.next_run_at = o.occurrence_at AND `+fired("t"), from, hi)
	if err != nil {
		return nil, fmt.Errorf("settle one-shots: read outbox rows %d..%d: %w", from+1, hi, err)
	}
	defer rows.Close()
	out := map[time.Time][]any{}
	for rows.Next() {
		var id int64
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			return nil, fmt.Errorf("settle one-shots: read outbox row: %w", err)
		}
		out[at] = append(out[at], id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("settle one-shots: read outbox rows %d..%d: %w", from+1, hi, err)
	}
	return out, nil
}

// settle stores "done" for the targets of byTime with their claim time as
// updated_at, in one READ COMMITTED transaction (record locks on the
// targets only), re-checking that each is still an active one-shot.
func (s *MySQLStore) settle(ctx context.Context, byTime map[time.Time][]any) (int64, error) {
	if len(byTime) == 0 {
		return 0, nil
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, fmt.Errorf("settle one-shots: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var settled int64
	for at, ids := range byTime {
		var b strings.Builder
		b.WriteString(`UPDATE notification_targets SET status = 'done', updated_at = ?
			WHERE schedule_kind = 'once' AND status = 'active' AND id IN `)
		inList(&b, len(ids))
		res, err := tx.ExecContext(ctx, b.String(), append([]any{at}, ids...)...)
		if err != nil {
			return 0, fmt.Errorf("settle %d one-shots: %w", len(ids), err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("settle one-shots: %w", err)
		}
		settled += n
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("settle one-shots: commit: %w", err)
	}
	return settled, nil
}

// PurgePublished deletes published rows created before before, looking at
// no more than the limit oldest rows, and returns how many it deleted; a
// result below limit means that nothing older is left. The row at the
// cursor is kept, so the outbox's auto-increment never falls back below
// the cursor, and so is every row SettleOneShots has not gone past yet.
func (s *MySQLStore) PurgePublished(ctx context.Context, before time.Time, limit int) (int64, error) {
	var upTo, settled uint64
	if err := s.db.QueryRowContext(ctx, `SELECT published_id, settled_id FROM outbox_relay WHERE id = 1`).Scan(&upTo, &settled); err != nil {
		return 0, fmt.Errorf("purge published outbox rows: read the cursors: %w", err)
	}
	if upTo == 0 {
		return 0, nil
	}
	// The window: the limit oldest rows, bounding the scan.
	var hi uint64
	err := s.db.QueryRowContext(ctx, `SELECT id FROM outbox ORDER BY id LIMIT 1 OFFSET ?`, limit-1).Scan(&hi)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		hi = upTo
	case err != nil:
		return 0, fmt.Errorf("purge published outbox rows: %w", err)
	}
	hi = min(hi, upTo-1, settled)
	res, err := s.db.ExecContext(ctx, `DELETE FROM outbox WHERE id <= ? AND created_at < ?`, hi, before)
	if err != nil {
		return 0, fmt.Errorf("purge published outbox rows: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("purge published outbox rows: %w", err)
	}
	return n, nil
}

// Backlog returns the number of outbox rows not yet published.
func (s *MySQLStore) Backlog(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox WHERE id > (SELECT published_id FROM outbox_relay WHERE id = 1)`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count unpublished outbox rows: %w", err)
	}
	return n, nil
}

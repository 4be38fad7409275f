package notifications

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// InboxCursor is a position in a recipient's inbox: newest first by
// arrival (persisted_at), then by the occurrence (target id, occurrence
// time), the order of inbox_entries' recipient index read backwards.
type InboxCursor struct {
	PersistedAt  time.Time
	TargetID     uint64
	OccurrenceAt time.Time
}

// cond is the condition "strictly after c in inbox order" (that is,
// older) on inbox_entries' columns; orEqual includes c itself.
func (c InboxCursor) cond(orEqual bool) (string, []any) {
	p, o := c.PersistedAt.UTC(), c.OccurrenceAt.UTC()
	cmp := "<"
	if orEqual {
		cmp = "<="
	}
	return `e.persisted_at <= ? AND (e.persisted_at < ? OR e.target_id < ? OR (e.target_id = ? AND e.occurrence_at ` + cmp + ` ?))`,
		[]any{p, p, c.TargetID, c.TargetID, o}
}

// inboxColumns selects what selectColumns does for inbox rows, reading
// inbox_entries (alias e) by its recipient index and each entry's
// notification (n) by primary key; the arrival time and read state are
// the entry's.
const inboxColumns = `SELECT n.notification_id, n.target_id, n.recipient_id, n.channel, n.template_id, n.template_version,
	n.status, n.attempts, n.provider_code, n.error, n.occurrence_at, n.due_at, n.dispatched_at, e.persisted_at, e.read_at
	FROM inbox_entries e FORCE INDEX (idx_inbox_entries_recipient)
	JOIN notifications n ON n.target_id = e.target_id AND n.occurrence_at = e.occurrence_at `

// InboxQuery selects a page of one recipient's inbox.
type InboxQuery struct {
	RecipientID string
	UnreadOnly  bool
	Limit       int
	After       *InboxCursor
}

// Inbox returns up to q.Limit rows of q.RecipientID's inbox (channel
// inbox), newest first: one backward range read of inbox_entries'
// recipient index, and a primary-key read of each entry's notification.
// UnreadOnly filters that range, so a page of unread rows reads past the
// read rows newer than them.
func (r *Reader) Inbox(ctx context.Context, q InboxQuery) (Page[InboxCursor], error) {
	where := []string{"e.recipient_id = ?"}
	args := []any{q.RecipientID}
	if q.UnreadOnly {
		where = append(where, "e.read_at IS NULL")
	}
	if q.After != nil {
		c, a := q.After.cond(false)
		where, args = append(where, c), append(args, a...)
	}
	stmt := inboxColumns + `WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY e.persisted_at DESC, e.target_id DESC, e.occurrence_at DESC LIMIT ?`
	items, err := r.query(ctx, "read inbox", stmt, append(args, q.Limit+1)...)
	if err != nil {
		return Page[InboxCursor]{}, err
	}
	return pageOf(items, q.Limit, func(n Notification) *InboxCursor {
		return &InboxCursor{PersistedAt: n.PersistedAt, TargetID: n.TargetID, OccurrenceAt: n.OccurrenceAt}
	}), nil
}

// UnreadCount returns the number of unread inbox rows of recipient: one
// primary-key read of inbox_unread, which triggers keep exact.
func (r *Reader) UnreadCount(ctx context.Context, recipient string) (int64, error) {
	var n int64
	err := r.db.QueryRowContext(ctx, `SELECT unread FROM inbox_unread WHERE recipient_id = ?`, recipient).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("count unread inbox of %s: %w", recipient, err)
	}
	return n, nil
}

// MarkRead marks the named unread inbox rows of recipient read at now and
// returns how many it changed. Ids of other recipients, other channels,
// unknown or already read rows are left alone, so marking again (or
// concurrently) changes nothing: the ids' keys are read first without
// locking anything, then one UPDATE of their inbox entries locks each entry
// it changes and re-checks read_at, and the counter moves once per changed
// entry. No notifications row is locked, so the sink never waits on it.
func (r *Reader) MarkRead(ctx context.Context, recipient string, ids []string, now time.Time) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	args := []any{recipient}
	for _, id := range ids {
		args = append(args, id)
	}
	rs, err := r.db.QueryContext(ctx, `SELECT target_id, occurrence_at FROM notifications
		WHERE recipient_id = ? AND channel = 'inbox' AND notification_id IN (`+strings.Repeat(",?", len(ids))[1:]+`)`, args...)
	if err != nil {
		return 0, fmt.Errorf("find inbox rows to mark read: %w", err)
	}
	defer rs.Close()
	keys := []any{now.UTC(), recipient}
	for rs.Next() {
		var target uint64
		var at time.Time
		if err := rs.Scan(&target, &at); err != nil {
			return 0, fmt.Errorf("find inbox rows to mark read: %w", err)
		}
		keys = append(keys, target, at)
	}
	if err := rs.Err(); err != nil {
		return 0, fmt.Errorf("find inbox rows to mark read: %w", err)
	}
	n := (len(keys) - 2) / 2
	if n == 0 {
		return 0, nil
	}
	return r.markRead(ctx, `UPDATE inbox_entries SET read_at = ? WHERE recipient_id = ? AND read_at IS NULL AND (`+
		strings.TrimSuffix(strings.Repeat("(target_id = ? AND occurrence_at = ?) OR ", n), " OR ")+`)`, keys)
}

// MarkReadUpTo marks read every unread inbox row of recipient at or after
// upTo in inbox order (upTo and everything that arrived before it). A row
// that arrives later has a later persisted_at and stays unread; so does
// one whose insert began before upTo's and committed after it (a window
// of one sink transaction).
func (r *Reader) MarkReadUpTo(ctx context.Context, recipient string, upTo InboxCursor, now time.Time) (int64, error) {
	c, a := upTo.cond(true)
	args := append([]any{now.UTC(), recipient}, a...)
	return r.markRead(ctx, `UPDATE inbox_entries e FORCE INDEX (idx_inbox_entries_recipient) SET e.read_at = ?
		WHERE e.recipient_id = ? AND e.read_at IS NULL AND `+c, args)
}

// PositionOf returns the inbox position of recipient's inbox row id, or
// ErrNotFound.
func (r *Reader) PositionOf(ctx context.Context, recipient, id string) (InboxCursor, error) {
	var c InboxCursor
	err := r.db.QueryRowContext(ctx, `SELECT e.persisted_at, e.target_id, e.occurrence_at FROM notifications n
		JOIN inbox_entries e ON e.target_id = n.target_id AND e.occurrence_at = n.occurrence_at
		WHERE n.notification_id = ? AND e.recipient_id = ?`, id, recipient).
		Scan(&c.PersistedAt, &c.TargetID, &c.OccurrenceAt)
	if errors.Is(err, sql.ErrNoRows) {
		return c, ErrNotFound
	}
	if err != nil {
		return c, fmt.Errorf("find inbox row %s: %w", id, err)
	}
	return c, nil
}

// deadlockRetries is how often markRead re-runs a statement InnoDB chose
// as a deadlock victim (the counter row is shared with the sink's inserts).
const deadlockRetries = 3

// markRead runs one autocommit UPDATE in READ COMMITTED (it locks only
// the rows it changes, no gaps, so the sink's inserts never wait for it)
// and returns the rows changed.
func (r *Reader) markRead(ctx context.Context, stmt string, args []any) (int64, error) {
	for attempt := 0; ; attempt++ {
		n, err := r.updateReadCommitted(ctx, stmt, args)
		if err == nil || !isDeadlock(err) || attempt == deadlockRetries {
			return n, err
		}
	}
}

func (r *Reader) updateReadCommitted(ctx context.Context, stmt string, args []any) (int64, error) {
	tx, err := r.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, fmt.Errorf("mark inbox read: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	res, err := tx.ExecContext(ctx, stmt, args...)
	if err != nil {
		return 0, fmt.Errorf("mark inbox read: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("mark inbox read: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("mark inbox read: commit: %w", err)
	}
	return n, nil
}

package notifications

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

// ErrNotFound is returned by Get for an unknown notification id.
var ErrNotFound = errors.New("notification not found")

// StatusUnknown is stored when the only result seen is a duplicate that
// does not say what the first dispatch recorded.
const StatusUnknown = "unknown"

// Statuses are the values of the status column a Filter may name: every
// final status of the event contract (a stored row never says
// "duplicate") and StatusUnknown.
var Statuses = []string{
	notiflowv1.Status_STATUS_DELIVERED.Name(),
	notiflowv1.Status_STATUS_FAILED.Name(),
	notiflowv1.Status_STATUS_RATE_LIMITED.Name(),
	notiflowv1.Status_STATUS_CANCELLED.Name(),
	StatusUnknown,
}

// ChannelInbox is the in-app channel: its rows are the recipient's inbox.
var ChannelInbox = notiflowv1.Channel_CHANNEL_INBOX.Name()

// Notification is one stored outcome as the read API shows it. ReadAt is
// set only for an inbox row that was marked read.
type Notification struct {
	NotificationID  string     `json:"notification_id"`
	TargetID        uint64     `json:"target_id"`
	RecipientID     string     `json:"recipient_id"`
	Channel         string     `json:"channel"`
	TemplateID      string     `json:"template_id"`
	TemplateVersion string     `json:"template_version"`
	Status          string     `json:"status"`
	Attempts        uint32     `json:"attempts"`
	ProviderCode    int32      `json:"provider_code"`
	Error           string     `json:"error"`
	OccurrenceAt    time.Time  `json:"occurrence_at"`
	DueAt           time.Time  `json:"due_at"`
	DispatchedAt    time.Time  `json:"dispatched_at"`
	PersistedAt     time.Time  `json:"persisted_at"`
	ReadAt          *time.Time `json:"read_at"`
}

const selectColumns = `SELECT notification_id, target_id, recipient_id, channel, template_id, template_version,
	status, attempts, provider_code, error, occurrence_at, due_at, dispatched_at, persisted_at,
	IF(channel = 'inbox', (SELECT e.read_at FROM inbox_entries e
		WHERE e.target_id = notifications.target_id AND e.occurrence_at = notifications.occurrence_at), NULL) AS read_at
	FROM notifications `

func scanNotification(sc interface{ Scan(...any) error }) (Notification, error) {
	var n Notification
	var readAt sql.NullTime
	err := sc.Scan(&n.NotificationID, &n.TargetID, &n.RecipientID, &n.Channel, &n.TemplateID, &n.TemplateVersion,
		&n.Status, &n.Attempts, &n.ProviderCode, &n.Error, &n.OccurrenceAt, &n.DueAt, &n.DispatchedAt, &n.PersistedAt, &readAt)
	if readAt.Valid {
		n.ReadAt = &readAt.Time
	}
	return n, err
}

// Reader answers the read API's queries. It is safe for concurrent use.
type Reader struct {
	db *sql.DB
}

// NewReader returns the reader over db (a go-sql-driver pool with
// parseTime and loc=UTC).
func NewReader(db *sql.DB) *Reader { return &Reader{db: db} }

// Get returns the notification with id, or ErrNotFound.
func (r *Reader) Get(ctx context.Context, id string) (Notification, error) {
	n, err := scanNotification(r.db.QueryRowContext(ctx, selectColumns+`WHERE notification_id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Notification{}, ErrNotFound
	}
	if err != nil {
		return Notification{}, fmt.Errorf("read notification %s: %w", id, err)
	}
	return n, nil
}

// Filter selects notifications for List. TargetID or RecipientID must be
// set. From and To bound occurrence_at (the occurrence's due time) as
// [From, To); zero means unbounded. After continues a listing (a Page's
// Next).
type Filter struct {
	TargetID    uint64
	RecipientID string
	Status      string
	From, To    time.Time
	Limit       int
	After       *ListCursor
}

// ListCursor is a position in a listing: newest first by occurrence_at,
// then by target id.
type ListCursor struct {
	OccurrenceAt time.Time
	TargetID     uint64
}

// Page is one page of a listing; Next is nil on the last page.
type Page[C any] struct {
	Items []Notification
	Next  *C
}

// List returns up to f.Limit notifications matching f, newest first. It
// reads one range of an index: the primary key (target_id,
// occurrence_at) when TargetID is set, else idx_notifications_recipient
// (recipient_id, occurrence_at); Status is a filter on that range. A row
// inserted while a client pages appears at most once.
func (r *Reader) List(ctx context.Context, f Filter) (Page[ListCursor], error) {
	var (
		where []string
		args  []any
		index = "PRIMARY"
	)
	if f.TargetID != 0 {
		where, args = append(where, "target_id = ?"), append(args, f.TargetID)
	}
	if f.RecipientID != "" {
		where, args = append(where, "recipient_id = ?"), append(args, f.RecipientID)
		if f.TargetID == 0 {
			index = "idx_notifications_recipient"
		}
	}
	if f.Status != "" {
		where, args = append(where, "status = ?"), append(args, f.Status)
	}
	if !f.From.IsZero() {
		where, args = append(where, "occurrence_at >= ?"), append(args, f.From.UTC())
	}
	if !f.To.IsZero() {
		where, args = append(where, "occurrence_at < ?"), append(args, f.To.UTC())
	}
	if c := f.After; c != nil {
		at := c.OccurrenceAt.UTC()
		where = append(where, "occurrence_at <= ? AND (occurrence_at < ? OR target_id < ?)")
		args = append(args, at, at, c.TargetID)
	}
	q := selectColumns + `FORCE INDEX (` + index + `) WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY occurrence_at DESC, target_id DESC LIMIT ?`
	items, err := r.query(ctx, "list notifications", q, append(args, f.Limit+1)...)
	if err != nil {
		return Page[ListCursor]{}, err
	}
	return pageOf(items, f.Limit, func(n Notification) *ListCursor {
		return &ListCursor{OccurrenceAt: n.OccurrenceAt, TargetID: n.TargetID}
	}), nil
}

// pageOf cuts items, read with LIMIT limit+1, to a page: when there are
// more than limit, Next is the position of the page's last item.
func pageOf[C any](items []Notification, limit int, position func(Notification) *C) Page[C] {
	if len(items) <= limit {
		return Page[C]{Items: items}
	}
	return Page[C]{Items: items[:limit], Next: position(items[limit-1])}
}

func (r *Reader) query(ctx context.Context, what, q string, args ...any) ([]Notification, error) {
	rs, err := r.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rs.Close()
	items := []Notification{}
	for rs.Next() {
		n, err := scanNotification(rs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		items = append(items, n)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return items, nil
}

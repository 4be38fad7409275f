package ports

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/notiflow/notiflow/lib/httpapi"
	"github.com/notiflow/notiflow/services/sink/notifications"
)

// Page sizes of the read API.
const (
	DefaultLimit = 50
	MaxLimit     = 500
	// maxReadIDs bounds the ids of one mark-read request.
	maxReadIDs = 500
	// maxReadBody bounds a mark-read request body.
	maxReadBody = 64 << 10
	// maxRecipientLen is the recipient_id column's length.
	maxRecipientLen = 191
)

// Reader is what the read API needs of the notifications table
// (notifications.Reader).
type Reader interface {
	Get(ctx context.Context, id string) (notifications.Notification, error)
	List(ctx context.Context, f notifications.Filter) (notifications.Page[notifications.ListCursor], error)
	Inbox(ctx context.Context, q notifications.InboxQuery) (notifications.Page[notifications.InboxCursor], error)
	UnreadCount(ctx context.Context, recipient string) (int64, error)
	MarkRead(ctx context.Context, recipient string, ids []string, now time.Time) (int64, error)
	MarkReadUpTo(ctx context.Context, recipient string, upTo notifications.InboxCursor, now time.Time) (int64, error)
	PositionOf(ctx context.Context, recipient, id string) (notifications.InboxCursor, error)
}

var _ Reader = (*notifications.Reader)(nil)

// ReadAPI serves delivery status and the in-app inbox over the sink's
// notifications table. It is safe for concurrent use.
type ReadAPI struct {
	reader Reader
	guard  *httpapi.Guard
	now    func() time.Time
}

// NewReadAPI returns the read API over reader; token is the bearer token
// every route requires (empty: no authentication).
func NewReadAPI(reader Reader, token string, log *slog.Logger) *ReadAPI {
	return &ReadAPI{reader: reader, guard: httpapi.NewGuard(token, readError, log, "read api request failed"), now: time.Now}
}

// Register adds the read API's routes to mux (the sink's HTTP server, next
// to /metrics and /readyz). Every route requires the bearer token.
func (a *ReadAPI) Register(mux *http.ServeMux) {
	mux.Handle("GET /v1/notifications", a.guard.Handle(a.list))
	mux.Handle("GET /v1/notifications/{notification_id}", a.guard.Handle(a.get))
	mux.Handle("GET /v1/recipients/{recipient_id}/inbox", a.guard.Handle(a.inbox))
	mux.Handle("GET /v1/recipients/{recipient_id}/inbox/unread_count", a.guard.Handle(a.unreadCount))
	mux.Handle("POST /v1/recipients/{recipient_id}/inbox/read", a.guard.Handle(a.markRead))
}

// readError maps the reader's errors (a httpapi.ErrorMap).
func readError(err error) (int, string, bool) {
	if errors.Is(err, notifications.ErrNotFound) {
		return http.StatusNotFound, "notification not found", true
	}
	return 0, "", false
}

// listResponse is a page: Next is the cursor of the following page, empty
// on the last one.
type listResponse struct {
	Notifications []notifications.Notification `json:"notifications"`
	NextCursor    string                       `json:"next_cursor"`
}

func (a *ReadAPI) get(w http.ResponseWriter, r *http.Request) error {
	n, err := a.reader.Get(r.Context(), r.PathValue("notification_id"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, n)
	return nil
}

func (a *ReadAPI) list(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	var f notifications.Filter
	var err error
	if s := q.Get("target_id"); s != "" {
		if f.TargetID, err = strconv.ParseUint(s, 10, 64); err != nil || f.TargetID == 0 {
			return httpapi.BadRequest("target_id: must be a positive integer, got %q", s)
		}
	}
	f.RecipientID = q.Get("recipient_id")
	if len(f.RecipientID) > maxRecipientLen {
		return httpapi.BadRequest("recipient_id: must be at most %d bytes", maxRecipientLen)
	}
	if f.TargetID == 0 && f.RecipientID == "" {
		return httpapi.BadRequest("target_id or recipient_id: one of them is required")
	}
	if f.Status = q.Get("status"); f.Status != "" && !slices.Contains(notifications.Statuses, f.Status) {
		return httpapi.BadRequest("status: must be one of %s, got %q", strings.Join(notifications.Statuses, ", "), f.Status)
	}
	if f.From, err = parseTime(q, "from"); err != nil {
		return err
	}
	if f.To, err = parseTime(q, "to"); err != nil {
		return err
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To) {
		return httpapi.BadRequest("to: must be after from")
	}
	if f.Limit, err = parseLimit(q.Get("limit")); err != nil {
		return err
	}
	if s := q.Get("cursor"); s != "" {
		c, ok := decodeListCursor(s)
		if !ok {
			return httpapi.BadRequest("cursor: not a cursor of this listing (use next_cursor of the previous page)")
		}
		f.After = &c
	}
	p, err := a.reader.List(r.Context(), f)
	if err != nil {
		return err
	}
	writePage(w, p, encodeListCursor)
	return nil
}

// writePage answers p, its Next encoded by encode.
func writePage[C any](w http.ResponseWriter, p notifications.Page[C], encode func(C) string) {
	resp := listResponse{Notifications: p.Items}
	if p.Next != nil {
		resp.NextCursor = encode(*p.Next)
	}
	httpapi.WriteJSON(w, http.StatusOK, resp)
}

func (a *ReadAPI) inbox(w http.ResponseWriter, r *http.Request) error {
	recipient, err := recipientOf(r)
	if err != nil {
		return err
	}
	qs := r.URL.Query()
	q := notifications.InboxQuery{RecipientID: recipient}
	if s := qs.Get("unread"); s != "" {
		if q.UnreadOnly, err = strconv.ParseBool(s); err != nil {
			return httpapi.BadRequest("unread: must be true or false, got %q", s)
		}
	}
	if q.Limit, err = parseLimit(qs.Get("limit")); err != nil {
		return err
	}
	if s := qs.Get("cursor"); s != "" {
		c, ok := decodeInboxCursor(s)
		if !ok {
			return httpapi.BadRequest("cursor: not a cursor of this inbox (use next_cursor of the previous page)")
		}
		q.After = &c
	}
	p, err := a.reader.Inbox(r.Context(), q)
	if err != nil {
		return err
	}
	writePage(w, p, encodeInboxCursor)
	return nil
}

func (a *ReadAPI) unreadCount(w http.ResponseWriter, r *http.Request) error {
	recipient, err := recipientOf(r)
	if err != nil {
		return err
	}
	n, err := a.reader.UnreadCount(r.Context(), recipient)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]int64{"unread": n})
	return nil
}

// readRequest names the rows to mark read: Ids, or UpTo (a cursor of an
// inbox page, or a notification id of this inbox) and every row before it.
type readRequest struct {
	IDs  []string `json:"ids"`
	UpTo string   `json:"up_to"`
}

func (a *ReadAPI) markRead(w http.ResponseWriter, r *http.Request) error {
	recipient, err := recipientOf(r)
	if err != nil {
		return err
	}
	var req readRequest
	if err := httpapi.Decode(w, r, maxReadBody, &req, httpapi.Hints{
		Example: `{"ids": ["<notification id>"]} or {"up_to": "<cursor or notification id>"}`, Fields: "ids, up_to",
	}); err != nil {
		return err
	}
	var marked int64
	switch {
	case req.IDs != nil && req.UpTo != "":
		return httpapi.BadRequest("ids or up_to: give one of them, not both")
	case req.IDs != nil:
		if len(req.IDs) == 0 || len(req.IDs) > maxReadIDs {
			return httpapi.BadRequest("ids: must hold 1 to %d notification ids, got %d", maxReadIDs, len(req.IDs))
		}
		if i := slices.Index(req.IDs, ""); i >= 0 {
			return httpapi.BadRequest("ids[%d]: must not be empty", i)
		}
		marked, err = a.reader.MarkRead(r.Context(), recipient, req.IDs, a.now())
	case req.UpTo != "":
		upTo, ok := decodeInboxCursor(req.UpTo)
		if !ok {
			if upTo, err = a.reader.PositionOf(r.Context(), recipient, req.UpTo); errors.Is(err, notifications.ErrNotFound) {
				return &httpapi.Error{Status: http.StatusNotFound, Msg: "up_to: neither a cursor nor a notification id of this inbox"}
			} else if err != nil {
				return err
			}
		}
		marked, err = a.reader.MarkReadUpTo(r.Context(), recipient, upTo, a.now())
	default:
		return httpapi.BadRequest("ids or up_to: one of them is required")
	}
	if err != nil {
		return err
	}
	unread, err := a.reader.UnreadCount(r.Context(), recipient)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]int64{"marked": marked, "unread": unread})
	return nil
}

func recipientOf(r *http.Request) (string, error) {
	id := r.PathValue("recipient_id")
	if id == "" || len(id) > maxRecipientLen {
		return "", httpapi.BadRequest("recipient_id: must be 1 to %d bytes", maxRecipientLen)
	}
	return id, nil
}

func parseLimit(s string) (int, error) {
	if s == "" {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, httpapi.BadRequest("limit: must be an integer from 1 to %d, got %q", MaxLimit, s)
	}
	return n, nil
}

func parseTime(q map[string][]string, name string) (time.Time, error) {
	v := q[name]
	if len(v) == 0 || v[0] == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v[0])
	if err != nil {
		return time.Time{}, httpapi.BadRequest("%s: must be an RFC 3339 time such as 2026-03-09T09:00:00Z, got %q", name, v[0])
	}
	return t, nil
}

// Cursors are base64url text of a tag and the position's numbers
// (microseconds for times), opaque to clients.
func encodeListCursor(c notifications.ListCursor) string {
	return encodeCursor(fmt.Sprintf("l:%d:%d", c.OccurrenceAt.UnixMicro(), c.TargetID))
}

func decodeListCursor(s string) (notifications.ListCursor, bool) {
	var c notifications.ListCursor
	var at int64
	if !decodeCursor(s, "l:%d:%d", &at, &c.TargetID) {
		return c, false
	}
	c.OccurrenceAt = time.UnixMicro(at).UTC()
	return c, true
}

func encodeInboxCursor(c notifications.InboxCursor) string {
	return encodeCursor(fmt.Sprintf("i:%d:%d:%d", c.PersistedAt.UnixMicro(), c.TargetID, c.OccurrenceAt.UnixMicro()))
}

func decodeInboxCursor(s string) (notifications.InboxCursor, bool) {
	var c notifications.InboxCursor
	var p, o int64
	if !decodeCursor(s, "i:%d:%d:%d", &p, &c.TargetID, &o) {
		return c, false
	}
	c.PersistedAt, c.OccurrenceAt = time.UnixMicro(p).UTC(), time.UnixMicro(o).UTC()
	return c, true
}

func encodeCursor(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// decodeCursor scans s's text with format; it fails unless every value is
// read and the text re-encodes to exactly s.
func decodeCursor(s, format string, vals ...any) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return false
	}
	n, err := fmt.Sscanf(string(b), format, vals...)
	return err == nil && n == len(vals) && encodeCursor(fmt.Sprintf(format, deref(vals)...)) == s
}

func deref(vals []any) []any {
	out := make([]any, len(vals))
	for i, v := range vals {
		switch p := v.(type) {
		case *int64:
			out[i] = *p
		case *uint64:
			out[i] = *p
		}
	}
	return out
}

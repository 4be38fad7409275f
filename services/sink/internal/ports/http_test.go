package ports_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/sink/internal/adapters"
	"github.com/notiflow/notiflow/services/sink/internal/domain"
	"github.com/notiflow/notiflow/services/sink/internal/ports"
	"github.com/notiflow/notiflow/services/sink/notifications"
)

const token = "read-api-test-token"

// readEnv is a migrated database of its own, the sink's store writing to
// it and the read API served over real HTTP.
type readEnv struct {
	store *adapters.Store
	url   string
}

func newReadEnv(t *testing.T) *readEnv {
	t.Helper()
	ctx := context.Background()
	store, err := adapters.Open(ctx, testkit.MySQLDSN(t), adapters.Options{MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	ports.NewReadAPI(notifications.NewReader(store.DB()), token, slog.New(slog.DiscardHandler)).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &readEnv{store: store, url: srv.URL}
}

var base = time.Date(2026, 3, 9, 9, 0, 0, 0, time.UTC)

// row is the row of the occurrence (target, minute) of recipient on
// channel.
func row(target uint64, minute int, recipient, channel string, st domain.Status) domain.Row {
	at := base.Add(time.Duration(minute) * time.Minute)
	return domain.Row{
		NotificationID: fmt.Sprintf("n-%d-%d", target, minute), TargetID: target, OccurrenceAt: at,
		RecipientID: recipient, Channel: channel, TemplateID: "welcome", Status: st, Attempts: 1,
		ProviderCode: 200, DueAt: at, DispatchedAt: at.Add(time.Second),
	}
}

// write stores rows as the sink does, one statement per call.
func (e *readEnv) write(t testing.TB, rows ...domain.Row) {
	t.Helper()
	if err := e.store.Upsert(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
}

// do sends a request with the bearer token auth (none when empty) and
// decodes a JSON answer into out (when not nil); it returns the status and
// the raw body.
func (e *readEnv) do(t testing.TB, method, path, auth string, body any, out any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, string(raw)
}

type page struct {
	Notifications []notifications.Notification `json:"notifications"`
	NextCursor    string                       `json:"next_cursor"`
}

// all follows next_cursor from path (which has a query) to the last page
// and returns the ids in order; between pages it calls between.
func (e *readEnv) all(t testing.TB, path string, between func()) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for range 1000 {
		var p page
		q := path
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		if code, body := e.do(t, http.MethodGet, q, token, nil, &p); code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", q, code, body)
		}
		for _, n := range p.Notifications {
			ids = append(ids, n.NotificationID)
		}
		if p.NextCursor == "" {
			return ids
		}
		cursor = p.NextCursor
		if between != nil {
			between()
		}
	}
	t.Fatal("more than 1000 pages")
	return nil
}

func ids(rows []domain.Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.NotificationID
	}
	return out
}

func TestEveryRouteNeedsTheToken(t *testing.T) {
	t.Parallel()
	e := newReadEnv(t)
	routes := []struct{ method, path string }{
		{http.MethodGet, "/v1/notifications?target_id=1"},
		{http.MethodGet, "/v1/notifications/n-1-1"},
		{http.MethodGet, "/v1/recipients/r/inbox"},
		{http.MethodGet, "/v1/recipients/r/inbox/unread_count"},
		{http.MethodPost, "/v1/recipients/r/inbox/read"},
	}
	for _, rt := range routes {
		for _, auth := range []string{"", "wrong"} {
			code, body := e.do(t, rt.method, rt.path, auth, map[string]any{"ids": []string{"x"}}, nil)
			if code != http.StatusUnauthorized || !strings.Contains(body, "bearer token") {
				t.Errorf("%s %s with token %q: %d %s, want 401", rt.method, rt.path, auth, code, body)
			}
		}
	}
}

func TestBadInputNamesTheField(t *testing.T) {
	t.Parallel()
	e := newReadEnv(t)
	long := strings.Repeat("r", 192)
	tests := []struct {
		name, method, path string
		body               any
		wantCode           int
		wantField          string
	}{
		{"no target or recipient", "GET", "/v1/notifications", nil, 400, "target_id or recipient_id"},
		{"target not a number", "GET", "/v1/notifications?target_id=x", nil, 400, "target_id"},
		{"target zero", "GET", "/v1/notifications?target_id=0", nil, 400, "target_id"},
		{"recipient too long", "GET", "/v1/notifications?recipient_id=" + long, nil, 400, "recipient_id"},
		{"bad status", "GET", "/v1/notifications?target_id=1&status=sent", nil, 400, "status"},
		{"bad from", "GET", "/v1/notifications?target_id=1&from=yesterday", nil, 400, "from"},
		{"bad to", "GET", "/v1/notifications?target_id=1&to=2026-13-01", nil, 400, "to"},
		{"to before from", "GET", "/v1/notifications?target_id=1&from=2026-03-09T10:00:00Z&to=2026-03-09T09:00:00Z", nil, 400, "to"},
		{"limit zero", "GET", "/v1/notifications?target_id=1&limit=0", nil, 400, "limit"},
		{"limit too big", "GET", "/v1/notifications?target_id=1&limit=501", nil, 400, "limit"},
		{"limit not a number", "GET", "/v1/recipients/r/inbox?limit=ten", nil, 400, "limit"},
		{"list cursor garbage", "GET", "/v1/notifications?target_id=1&cursor=zz!", nil, 400, "cursor"},
		{"inbox cursor given to the list", "GET", "/v1/notifications?target_id=1&cursor=aToxOjI6Mw", nil, 400, "cursor"},
		{"inbox cursor garbage", "GET", "/v1/recipients/r/inbox?cursor=bm9wZQ", nil, 400, "cursor"},
		{"bad unread", "GET", "/v1/recipients/r/inbox?unread=maybe", nil, 400, "unread"},
		{"inbox recipient too long", "GET", "/v1/recipients/" + long + "/inbox", nil, 400, "recipient_id"},
		{"unknown notification", "GET", "/v1/notifications/nope", nil, 404, "notification not found"},
		{"empty ids", "POST", "/v1/recipients/r/inbox/read", map[string]any{"ids": []string{}}, 400, "ids"},
		{"empty id", "POST", "/v1/recipients/r/inbox/read", map[string]any{"ids": []string{"a", ""}}, 400, "ids[1]"},
		{"neither ids nor up_to", "POST", "/v1/recipients/r/inbox/read", map[string]any{}, 400, "ids or up_to"},
		{"both ids and up_to", "POST", "/v1/recipients/r/inbox/read", map[string]any{"ids": []string{"a"}, "up_to": "a"}, 400, "ids or up_to"},
		{"ids not an array", "POST", "/v1/recipients/r/inbox/read", map[string]any{"ids": "a"}, 400, "ids"},
		{"unknown field", "POST", "/v1/recipients/r/inbox/read", map[string]any{"all": true}, 400, "all"},
		{"unknown up_to", "POST", "/v1/recipients/r/inbox/read", map[string]any{"up_to": "nope"}, 404, "up_to"},
	}
	for _, tt := range tests {
		code, body := e.do(t, tt.method, tt.path, token, tt.body, nil)
		var got struct{ Error string }
		_ = json.Unmarshal([]byte(body), &got)
		if code != tt.wantCode || !strings.Contains(got.Error, tt.wantField) {
			t.Errorf("%s: %d %s, want %d naming %q", tt.name, code, body, tt.wantCode, tt.wantField)
		}
	}
}

func TestListFiltersAndPages(t *testing.T) {
	t.Parallel()
	e := newReadEnv(t)
	var t1, t2, t3 []domain.Row
	for m := range 23 {
		st := domain.StatusDelivered
		if m%5 == 0 {
			st = domain.StatusFailed
		}
		t1 = append(t1, row(1, m, "alice", "email", st))
	}
	for m := range 17 {
		t2 = append(t2, row(2, m, "alice", "sms", domain.StatusDelivered))
	}
	for m := range 5 {
		t3 = append(t3, row(3, m, "bob", "email", domain.StatusDelivered))
	}
	e.write(t, slices.Concat(t1, t2, t3)...)

	newestFirst := func(rows []domain.Row) []string {
		s := slices.Clone(rows)
		slices.SortFunc(s, func(a, b domain.Row) int {
			if c := b.OccurrenceAt.Compare(a.OccurrenceAt); c != 0 {
				return c
			}
			return int(b.TargetID) - int(a.TargetID)
		})
		return ids(s)
	}
	failed := slices.DeleteFunc(slices.Clone(t1), func(r domain.Row) bool { return r.Status != domain.StatusFailed })
	window := slices.Concat(t1[3:9], t2[3:9])
	tests := []struct {
		name, query string
		want        []string
	}{
		{"target", "target_id=1&limit=4", newestFirst(t1)},
		{"recipient", "recipient_id=alice&limit=7", newestFirst(slices.Concat(t1, t2))},
		{"target and recipient", "target_id=3&recipient_id=bob&limit=2", newestFirst(t3)},
		{"target of another recipient", "target_id=3&recipient_id=alice", nil},
		{"status", "target_id=1&status=failed&limit=2", newestFirst(failed)},
		{"time range [from, to)", "recipient_id=alice&limit=5&from=" + url.QueryEscape(base.Add(3*time.Minute).Format(time.RFC3339)) +
			"&to=" + url.QueryEscape(base.Add(9*time.Minute).Format(time.RFC3339)), newestFirst(window)},
		{"one page", "recipient_id=bob", newestFirst(t3)},
	}
	for _, tt := range tests {
		got := e.all(t, "/v1/notifications?"+tt.query, nil)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestPagesWhileRowsArrive: rows inserted between pages (newer and older
// than the cursor) never make a stored row appear twice or go missing.
func TestPagesWhileRowsArrive(t *testing.T) {
	t.Parallel()
	e := newReadEnv(t)
	var stored []domain.Row
	for m := range 40 {
		stored = append(stored, row(uint64(10+m%4), 100+m, "carol", "push", domain.StatusDelivered))
	}
	e.write(t, stored...)
	next := 0
	got := e.all(t, "/v1/notifications?recipient_id=carol&limit=3", func() {
		next++ // one row newer than everything, one older, one in the middle
		e.write(t, row(20, 1000+next, "carol", "push", domain.StatusDelivered),
			row(21, next, "carol", "push", domain.StatusDelivered),
			row(22, 120, "carol", "push", domain.StatusDelivered))
	})
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
		if seen[id] > 1 {
			t.Errorf("%s listed twice", id)
		}
	}
	for _, r := range stored {
		if seen[r.NotificationID] != 1 {
			t.Errorf("%s listed %d times, want once", r.NotificationID, seen[r.NotificationID])
		}
	}
}

func TestGetByID(t *testing.T) {
	t.Parallel()
	e := newReadEnv(t)
	r := row(7, 1, "dave", "webhook", domain.StatusFailed)
	r.Attempts, r.ProviderCode, r.Error = 3, 503, "upstream unavailable"
	e.write(t, r)
	var n notifications.Notification
	if code, body := e.do(t, "GET", "/v1/notifications/"+r.NotificationID, token, nil, &n); code != 200 {
		t.Fatalf("get: %d %s", code, body)
	}
	if n.NotificationID != r.NotificationID || n.TargetID != 7 || n.RecipientID != "dave" || n.Channel != "webhook" ||
		n.TemplateID != "welcome" || n.Status != "failed" || n.Attempts != 3 || n.ProviderCode != 503 ||
		n.Error != "upstream unavailable" || !n.DueAt.Equal(r.DueAt) || !n.OccurrenceAt.Equal(r.OccurrenceAt) ||
		!n.DispatchedAt.Equal(r.DispatchedAt) || n.PersistedAt.IsZero() || n.ReadAt != nil {
		t.Fatalf("got %+v for %+v", n, r)
	}
	if code, _ := e.do(t, "GET", "/v1/notifications/n-7-2", token, nil, nil); code != 404 {
		t.Fatalf("unknown id: %d, want 404", code)
	}
}

// inbox writes n inbox rows of recipient, one statement each (so each
// arrives after the previous), and returns them oldest first.
func (e *readEnv) inbox(t testing.TB, recipient string, firstTarget uint64, n int) []domain.Row {
	t.Helper()
	var rows []domain.Row
	for i := range n {
		r := row(firstTarget+uint64(i), 0, recipient, notifications.ChannelInbox, domain.StatusDelivered)
		e.write(t, r)
		rows = append(rows, r)
	}
	return rows
}

// arrive writes n inbox rows one at a time, as the sink's batches arrive
// while mark-read requests run: an insert InnoDB picks as a deadlock
// victim (the unread counter row is shared with mark-read) is written
// again, as the sink's consumer retries a failed batch. Safe to call from
// a goroutine other than the test's: it reports failures with Errorf and
// returns the rows written.
func (e *readEnv) arrive(t testing.TB, recipient string, firstTarget uint64, n int) []domain.Row {
	var rows []domain.Row
	for i := range n {
		r := row(firstTarget+uint64(i), 0, recipient, notifications.ChannelInbox, domain.StatusDelivered)
		var err error
		for attempt := 0; attempt < 10; attempt++ {
			var me *mysql.MySQLError
			if err = e.store.Upsert(context.Background(), []domain.Row{r}); err == nil || !errors.As(err, &me) || me.Number != 1213 {
				break
			}
		}
		if err != nil {
			t.Errorf("write arrival %d: %v", i, err)
			return rows
		}
		rows = append(rows, r)
	}
	return rows
}

func (e *readEnv) unread(t testing.TB, recipient string) int64 {
	t.Helper()
	var c struct{ Unread int64 }
	if code, body := e.do(t, "GET", "/v1/recipients/"+recipient+"/inbox/unread_count", token, nil, &c); code != 200 {
		t.Fatalf("unread_count: %d %s", code, body)
	}
	return c.Unread
}

func (e *readEnv) markRead(t testing.TB, recipient string, body any) (marked, unread int64) {
	t.Helper()
	var out struct{ Marked, Unread int64 }
	if code, raw := e.do(t, "POST", "/v1/recipients/"+recipient+"/inbox/read", token, body, &out); code != 200 {
		t.Fatalf("mark read %v: %d %s", body, code, raw)
	}
	return out.Marked, out.Unread
}

func reversed(s []string) []string {
	s = slices.Clone(s)
	slices.Reverse(s)
	return s
}

func TestInboxReadUnreadMarkRead(t *testing.T) {
	t.Parallel()
	e := newReadEnv(t)
	rows := e.inbox(t, "erin", 100, 12)
	e.write(t, row(200, 0, "erin", "email", domain.StatusDelivered)) // not the inbox
	e.inbox(t, "frank", 300, 2)                                      // another recipient

	if got, want := e.all(t, "/v1/recipients/erin/inbox?limit=5", nil), reversed(ids(rows)); !slices.Equal(got, want) {
		t.Fatalf("inbox %v, want newest first %v", got, want)
	}
	if n := e.unread(t, "erin"); n != 12 {
		t.Fatalf("unread %d, want 12", n)
	}
	if n := e.unread(t, "nobody"); n != 0 {
		t.Fatalf("unread of an unknown recipient %d, want 0", n)
	}

	// By ids: frank's row and an unknown id are left alone; again is a no-op.
	body := map[string]any{"ids": []string{rows[0].NotificationID, rows[5].NotificationID, "n-300-0", "unknown"}}
	if marked, unread := e.markRead(t, "erin", body); marked != 2 || unread != 10 {
		t.Fatalf("mark by ids: marked %d, unread %d; want 2, 10", marked, unread)
	}
	if marked, unread := e.markRead(t, "erin", body); marked != 0 || unread != 10 {
		t.Fatalf("mark again: marked %d, unread %d; want 0, 10", marked, unread)
	}
	if n := e.unread(t, "frank"); n != 2 {
		t.Fatalf("frank's unread %d, want 2", n)
	}
	var one notifications.Notification
	e.do(t, "GET", "/v1/notifications/"+rows[5].NotificationID, token, nil, &one)
	if one.ReadAt == nil {
		t.Fatalf("read row has no read_at: %+v", one)
	}
	unreadIDs := reversed(ids(slices.Concat(rows[1:5], rows[6:])))
	if got := e.all(t, "/v1/recipients/erin/inbox?unread=true&limit=3", nil); !slices.Equal(got, unreadIDs) {
		t.Fatalf("unread inbox %v, want %v", got, unreadIDs)
	}

	// Up to a cursor: the last row of the first 4-row page and all older.
	var p page
	e.do(t, "GET", "/v1/recipients/erin/inbox?limit=4", token, nil, &p)
	if marked, unread := e.markRead(t, "erin", map[string]any{"up_to": p.NextCursor}); marked != 7 || unread != 3 {
		t.Fatalf("mark up to a cursor: marked %d, unread %d; want 7, 3", marked, unread)
	}
	if got := e.all(t, "/v1/recipients/erin/inbox?unread=true", nil); !slices.Equal(got, reversed(ids(rows[9:]))) {
		t.Fatalf("unread after up_to %v, want %v", got, reversed(ids(rows[9:])))
	}
	// Up to a notification id.
	if marked, unread := e.markRead(t, "erin", map[string]any{"up_to": rows[10].NotificationID}); marked != 2 || unread != 1 {
		t.Fatalf("mark up to an id: marked %d, unread %d; want 2, 1", marked, unread)
	}
	if code, _ := e.do(t, "POST", "/v1/recipients/frank/inbox/read", token, map[string]any{"up_to": rows[10].NotificationID}, nil); code != 404 {
		t.Fatalf("up_to another recipient's id: %d, want 404", code)
	}
}

// TestConcurrentMarkReadAndArrivals: "all up to" requests racing each
// other, mark-read by ids and new arrivals: every row up to the point is
// read once, every new arrival stays unread, the count is exact.
func TestConcurrentMarkReadAndArrivals(t *testing.T) {
	t.Parallel()
	e := newReadEnv(t)
	old := e.inbox(t, "gina", 1000, 60)
	upTo := old[len(old)-1].NotificationID

	var wg sync.WaitGroup
	arrived := make(chan []domain.Row, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		arrived <- e.arrive(t, "gina", 5000, 40)
	}()
	var mu sync.Mutex
	var marked int64
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5 {
				var body any = map[string]any{"up_to": upTo}
				if (w+i)%2 == 1 {
					body = map[string]any{"ids": []string{old[(w*7+i)%60].NotificationID, old[(w*11+i)%60].NotificationID}}
				}
				m, _ := e.markRead(t, "gina", body)
				mu.Lock()
				marked += m
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fresh := <-arrived
	if marked != 60 {
		t.Errorf("marked %d rows in all, want each of the 60 once", marked)
	}
	if n := e.unread(t, "gina"); n != 40 {
		t.Errorf("unread %d, want the 40 new arrivals", n)
	}
	if got, want := e.all(t, "/v1/recipients/gina/inbox?unread=true&limit=100", nil), reversed(ids(fresh)); !slices.Equal(got, want) {
		t.Errorf("unread rows %v, want the new arrivals %v", got, want)
	}
	var stored int64
	if err := e.store.DB().QueryRow(`SELECT COUNT(*) FROM inbox_entries WHERE recipient_id = 'gina' AND read_at IS NULL`).Scan(&stored); err != nil || stored != 40 {
		t.Errorf("rows without read_at: %d, %v; want 40", stored, err)
	}
}

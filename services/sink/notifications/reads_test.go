package notifications_test

import (
	"context"
	"testing"
	"time"

	"github.com/notiflow/notiflow/services/sink/notifications"
)

// TestInboxPageIsABoundedRangeRead: with 3,000 rows in a recipient's inbox
// (and other recipients' rows around it), the first page and the unread
// count read a bounded number of index entries, not the recipient's rows:
// a page reads each item's inbox entry and its notification by primary
// key, two reads per item.
func TestInboxPageIsABoundedRangeRead(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	db.SetMaxOpenConns(1) // FLUSH STATUS and the reads share one session
	ctx := context.Background()
	if err := notifications.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 3, 9, 9, 0, 0, 0, time.UTC)
	for i, r := range []string{"before", "heavy", "after"} {
		if err := notifications.SeedInbox(ctx, db, notifications.Seed{
			RecipientID: r, FirstTarget: uint64(1 + i*10_000), Count: 3000, Start: start, IDPrefix: r + "-",
		}); err != nil {
			t.Fatal(err)
		}
	}
	reader := notifications.NewReader(db)
	reads := func(do func()) int64 {
		t.Helper()
		if _, err := db.ExecContext(ctx, `FLUSH STATUS`); err != nil {
			t.Fatal(err)
		}
		do()
		var total int64
		rs, err := db.QueryContext(ctx, `SHOW SESSION STATUS LIKE 'Handler_read%'`)
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		for rs.Next() {
			var name string
			var v int64
			if err := rs.Scan(&name, &v); err != nil {
				t.Fatal(err)
			}
			total += v
		}
		return total
	}

	for _, unread := range []bool{false, true} {
		var page notifications.Page[notifications.InboxCursor]
		n := reads(func() {
			var err error
			page, err = reader.Inbox(ctx, notifications.InboxQuery{RecipientID: "heavy", UnreadOnly: unread, Limit: 50})
			if err != nil {
				t.Fatal(err)
			}
		})
		if len(page.Items) != 50 || page.Items[0].NotificationID != "heavy-13000" || page.Next == nil {
			t.Fatalf("unread=%v: first page %d rows from %q; want 50 from the newest, heavy-13000", unread, len(page.Items), page.Items[0].NotificationID)
		}
		t.Logf("unread=%v: first page read %d rows", unread, n)
		if n > 2*51+10 {
			t.Errorf("unread=%v: the first page of 50 read %d rows; want a bounded range (<= 112: 51 entries and their rows)", unread, n)
		}
	}
	var count int64
	n := reads(func() {
		var err error
		if count, err = reader.UnreadCount(ctx, "heavy"); err != nil {
			t.Fatal(err)
		}
	})
	if count != 3000 || n > 2 {
		t.Errorf("unread count %d read %d rows; want 3000 from one row", count, n)
	}

}

// TestMarkReadLocksNoNotificationRow: marking inbox rows read never waits
// for a notifications row another transaction holds (as the sink's write
// of a duplicate result does): it reads the ids' keys without locking and
// changes only their inbox entries.
func TestMarkReadLocksNoNotificationRow(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	ctx := context.Background()
	if err := notifications.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := notifications.SeedInbox(ctx, db, notifications.Seed{
		RecipientID: "lee", FirstTarget: 1, Count: 2, Start: time.Date(2026, 3, 9, 9, 0, 0, 0, time.UTC), IDPrefix: "lee-",
	}); err != nil {
		t.Fatal(err)
	}
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback() }()
	if _, err := holder.ExecContext(ctx, `SELECT * FROM notifications WHERE notification_id IN ('lee-1', 'lee-2') FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	reader := notifications.NewReader(db)
	if n, err := reader.MarkRead(mctx, "lee", []string{"lee-1"}, time.Now()); err != nil || n != 1 {
		t.Fatalf("mark lee-1 read while its notification row is locked: %d, %v; want 1 without waiting", n, err)
	}
	if n, err := reader.UnreadCount(mctx, "lee"); err != nil || n != 1 {
		t.Fatalf("unread %d, %v; want 1", n, err)
	}
}

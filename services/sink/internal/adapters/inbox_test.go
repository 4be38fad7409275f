package adapters

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/notiflow/notiflow/services/sink/internal/domain"
	"github.com/notiflow/notiflow/services/sink/notifications"
)

// entry is an inbox entry as stored, with its notification's arrival time.
type entry struct {
	recipient             string
	persisted, rowPersist time.Time
	read                  bool
}

// readEntries returns inbox_entries by target id, each with the
// persisted_at of its notifications row.
func readEntries(t *testing.T, db *sql.DB) map[uint64]entry {
	t.Helper()
	rs, err := db.Query(`SELECT e.target_id, e.recipient_id, e.persisted_at, n.persisted_at, e.read_at IS NOT NULL
		FROM inbox_entries e JOIN notifications n ON n.target_id = e.target_id AND n.occurrence_at = e.occurrence_at`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	out := map[uint64]entry{}
	for rs.Next() {
		var id uint64
		var e entry
		if err := rs.Scan(&id, &e.recipient, &e.persisted, &e.rowPersist, &e.read); err != nil {
			t.Fatal(err)
		}
		out[id] = e
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	var all int
	if err := db.QueryRow(`SELECT COUNT(*) FROM inbox_entries`).Scan(&all); err != nil || all != len(out) {
		t.Fatalf("%d inbox entries (%v), %d of them with their notification", all, err, len(out))
	}
	return out
}

func unread(t *testing.T, db *sql.DB, recipient string) int64 {
	t.Helper()
	n, err := notifications.NewReader(db).UnreadCount(context.Background(), recipient)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// inboxRows are four rows of one batch, targets 101-104: two inbox rows of
// ann (102, 104) after each of two sim rows.
func inboxRows() []domain.Row {
	var res []*domain.Result
	for i, id := range []string{"s1", "i1", "s2", "i2"} {
		r := result(id, domain.StatusDelivered, 1)
		r.TargetID = uint64(101 + i)
		if strings.HasPrefix(id, "i") {
			r.Channel, r.RecipientID = notifications.ChannelInbox, "ann"
		}
		res = append(res, r)
	}
	return domain.Collapse(res)
}

// TestUpsertWritesInboxEntries: a batch's inbox rows (and only they) get
// their inbox entry, with their row's arrival time, in the same
// transaction, whose INSERT is still the prepared one; writing the batch
// again (duplicate results) keeps the entries, their read state and the
// unread count as they were; deleting a notification deletes its entry
// and counts it out.
func TestUpsertWritesInboxEntries(t *testing.T) {
	t.Parallel()
	// A write that needed a second connection would wait for ever on this
	// one-connection pool: fail instead.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := openStoreWith(t, Options{MaxConns: 1, PreparedRows: 4}) // the batch's size
	rows := inboxRows()
	before := stmtCounters(t, s)
	if err := s.Upsert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if c := stmtCounters(t, s); c.prepare-before.prepare != 1 || c.execute-before.execute != 1 {
		t.Fatalf("the inbox batch's transaction: %d statements prepared, %d executed; want its INSERT prepared and executed once",
			c.prepare-before.prepare, c.execute-before.execute)
	}
	got := readEntries(t, s.DB())
	if len(got) != 2 || got[102].recipient != "ann" || got[104].recipient != "ann" {
		t.Fatalf("inbox entries %+v; want targets 102 and 104 of ann", got)
	}
	for id, e := range got {
		if !e.persisted.Equal(e.rowPersist) || e.read {
			t.Errorf("entry %d: %+v; want its row's persisted_at, unread", id, e)
		}
	}
	if n := unread(t, s.DB(), "ann"); n != 2 {
		t.Fatalf("unread %d, want 2", n)
	}

	reader := notifications.NewReader(s.DB())
	if n, err := reader.MarkRead(ctx, "ann", []string{"i1"}, time.Now()); err != nil || n != 1 {
		t.Fatalf("mark i1 read: %d, %v", n, err)
	}
	if err := s.Upsert(ctx, rows); err != nil { // the duplicate path, in the transaction
		t.Fatal(err)
	}
	if c := stmtCounters(t, s); c.prepare-before.prepare != 1 {
		t.Fatalf("%d statements prepared after a second transaction on the same connection, want 1", c.prepare-before.prepare)
	}
	again := readEntries(t, s.DB())
	if len(again) != 2 || !again[102].read || again[104].read || !again[104].persisted.Equal(got[104].persisted) ||
		!again[104].rowPersist.Equal(got[104].rowPersist) {
		t.Fatalf("entries after the batch again %+v; want i1 read, i2 unread, arrival (entry and row) unchanged", again)
	}
	if n := unread(t, s.DB(), "ann"); n != 1 {
		t.Fatalf("unread %d after the batch again, want 1", n)
	}
	page, err := reader.Inbox(ctx, notifications.InboxQuery{RecipientID: "ann", Limit: 10})
	if err != nil || len(page.Items) != 2 || page.Items[0].NotificationID != "i2" || page.Items[1].ReadAt == nil {
		t.Fatalf("inbox page %+v, %v; want i2 then i1 (read)", page.Items, err)
	}
	if n, err := notifications.NewReader(s.DB()).Get(ctx, "i1"); err != nil || n.ReadAt == nil {
		t.Fatalf("get i1: %+v, %v; want it read", n, err)
	}

	runs := notifications.NewRuns(s.DB())
	if err := runs.Delete(ctx, notifications.Span{FromTarget: 103, ToTarget: 104, RunID: "run1"}); err != nil {
		t.Fatal(err)
	}
	if left := readEntries(t, s.DB()); len(left) != 1 || !left[102].read {
		t.Fatalf("entries after deleting 103-104: %+v; want i1's alone", left)
	}
	if n := unread(t, s.DB(), "ann"); n != 0 {
		t.Fatalf("unread %d after deleting the unread row, want 0", n)
	}
}

// v3Insert is how a sink of schema version 3 wrote its rows: the first 18
// of AppendArgs's values.
const v3Insert = `INSERT INTO notifications (notification_id, target_id, occurrence_at, recipient_id, sequence, channel,
 template_id, status, attempts, provider_code, error, body, run_id, due_at, dispatched_at, duplicates, from_duplicate, template_version)
 VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`

// TestMigrateMovesInboxRowsApart: a database at version 3 with inbox rows
// (one of them read) and sim rows is upgraded: every inbox row has its
// entry with its read state and arrival, the unread counts are unchanged,
// notifications keeps no inbox index, read state or insert trigger, and a
// sink of version 3 can no longer insert (a transient error, so it retries
// without committing instead of storing rows without their entries).
func TestMigrateMovesInboxRowsApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStoreAt(t, Options{MaxConns: 2}, 3)
	rows := inboxRows()
	bob := result("i3", domain.StatusDelivered, 1)
	bob.TargetID, bob.Channel, bob.RecipientID = 105, notifications.ChannelInbox, "bob"
	rows = append(rows, domain.Collapse([]*domain.Result{bob})...)
	for i := range rows {
		if _, err := s.DB().ExecContext(ctx, v3Insert, AppendArgs(nil, &rows[i])[:18]...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DB().ExecContext(ctx, `UPDATE notifications SET read_at = UTC_TIMESTAMP(6) WHERE notification_id = 'i1'`); err != nil {
		t.Fatal(err)
	}
	if a, b := unread(t, s.DB(), "ann"), unread(t, s.DB(), "bob"); a != 1 || b != 1 {
		t.Fatalf("version 3 counted ann %d, bob %d unread; want 1 and 1", a, b)
	}
	var persisted time.Time
	if err := s.DB().QueryRowContext(ctx, `SELECT persisted_at FROM notifications WHERE notification_id = 'i3'`).Scan(&persisted); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := readEntries(t, s.DB())
	if len(got) != 3 || !got[102].read || got[104].read || got[105].read || got[105].recipient != "bob" || !got[105].persisted.Equal(persisted) {
		t.Fatalf("entries after the upgrade %+v; want 102 (read), 104 of ann, 105 of bob arrived at %v", got, persisted)
	}
	if a, b := unread(t, s.DB(), "ann"), unread(t, s.DB(), "bob"); a != 1 || b != 1 {
		t.Fatalf("after the upgrade ann %d, bob %d unread; want 1 and 1", a, b)
	}
	var cols, indexes, triggers string
	for q, into := range map[string]*string{
		`SELECT GROUP_CONCAT(column_name ORDER BY column_name) FROM information_schema.columns
			WHERE table_schema = DATABASE() AND table_name = 'notifications' AND column_name IN ('read_at', 'writer_schema')`: &cols,
		`SELECT GROUP_CONCAT(DISTINCT index_name ORDER BY index_name) FROM information_schema.statistics
			WHERE table_schema = DATABASE() AND table_name = 'notifications'`: &indexes,
		`SELECT GROUP_CONCAT(trigger_name ORDER BY trigger_name) FROM information_schema.triggers
			WHERE trigger_schema = DATABASE() AND event_object_table = 'notifications'`: &triggers,
	} {
		if err := s.DB().QueryRowContext(ctx, q).Scan(into); err != nil {
			t.Fatal(err)
		}
	}
	if cols != "writer_schema" || indexes != "idx_notifications_recipient,PRIMARY,uq_notifications_notification" ||
		triggers != "notifications_inbox_entry_delete" {
		t.Fatalf("notifications: columns %q, indexes %q, triggers %q; want writer_schema only, no inbox index, the delete trigger alone",
			cols, indexes, triggers)
	}

	late := result("late", domain.StatusDelivered, 1)
	late.TargetID, late.Channel, late.RecipientID = 106, notifications.ChannelInbox, "ann"
	lateRow := domain.Collapse([]*domain.Result{late})
	_, err := s.DB().ExecContext(ctx, v3Insert, AppendArgs(nil, &lateRow[0])[:18]...)
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1364 || IsRejected(classify(err)) {
		t.Fatalf("a version 3 insert after the upgrade: %v; want error 1364, transient", err)
	}
	if err := s.Upsert(ctx, lateRow); err != nil {
		t.Fatal(err)
	}
	if n := unread(t, s.DB(), "ann"); n != 2 {
		t.Fatalf("ann unread %d after a new inbox row, want 2", n)
	}
	ids := []uint64{}
	for id := range readEntries(t, s.DB()) {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []uint64{102, 104, 105, 106}) {
		t.Fatalf("entries %v, want 102 104 105 106", ids)
	}
}

// TestUpsertAfterFailedPrepareGoesInterpolated: once preparing the INSERT
// failed (here: the table did not exist yet), full batches are written
// interpolated for prepareRetry without asking the server again.
func TestUpsertAfterFailedPrepareGoesInterpolated(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := openStoreAt(t, Options{MaxConns: 1, PreparedRows: 4}, 0)
	rows := inboxRows()
	for i := range rows {
		rows[i].Channel = "sim"
	}
	if err := s.Upsert(ctx, rows); err == nil || IsRejected(err) {
		t.Fatalf("upsert before the table exists: %v; want a transient error", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	before := stmtCounters(t, s)
	if err := s.Upsert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if c := stmtCounters(t, s); c.prepare != before.prepare || c.execute != before.execute {
		t.Fatalf("%d prepared, %d executed right after a failed prepare; want the batch interpolated",
			c.prepare-before.prepare, c.execute-before.execute)
	}
	if n := len(readRows(t, s.DB())); n != 4 {
		t.Fatalf("%d rows, want 4", n)
	}
}

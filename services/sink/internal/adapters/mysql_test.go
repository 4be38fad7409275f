package adapters

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/notiflow/notiflow/lib/mysqlx"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/sink/internal/domain"
	"github.com/notiflow/notiflow/services/sink/notifications"
)

func openStore(t *testing.T) *Store { return openStoreWith(t, Options{MaxConns: 4}) }

// openStoreWith opens a store with opt on a fresh migrated database.
func openStoreWith(t *testing.T, opt Options) *Store {
	t.Helper()
	s := openStoreAt(t, opt, 0)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// openStoreAt opens a store with opt on a fresh database migrated to its
// first version schema versions (none when 0).
func openStoreAt(t *testing.T, opt Options, version int) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, testkit.MySQLDSN(t), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := mysqlx.Migrate(ctx, s.DB(), notifications.MigrationTable, notifications.Migrations()[:version]); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	v, err := s.SchemaVersion(context.Background())
	if want := len(notifications.Migrations()); err != nil || v != want {
		t.Fatalf("schema version %d, %v; want %d", v, err, want)
	}
}

var base = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// result is a result of notification id; the occurrence (target id and
// time), which the primary key makes unique, follows from the id as the
// scheduler derives the id from the occurrence.
func result(id string, st domain.Status, at int) *domain.Result {
	h := fnv.New64a()
	h.Write([]byte(id))
	return &domain.Result{
		NotificationID: id, TargetID: h.Sum64() >> 1, OccurrenceAt: base, RecipientID: "rcp-" + id, Sequence: 3,
		Channel: "sim", TemplateID: "tpl", Status: st, Attempts: uint32(at), ProviderCode: int32(200 + at),
		Error: fmt.Sprintf("e%d", at), Body: fmt.Sprintf("body %d", at), RunID: "run1",
		DueAt: base, DispatchedAt: base.Add(time.Duration(at) * time.Millisecond), TemplateVersion: fmt.Sprintf("v%d", at),
	}
}

type stored struct {
	status       string
	attempts     uint32
	providerCode int32
	errText      string
	body         string
	dispatchedAt time.Time
	duplicates   int
	fromDup      bool
	tplVersion   string
}

func readRows(t *testing.T, db *sql.DB) map[string]stored {
	t.Helper()
	rows, err := db.Query(`SELECT notification_id, status, attempts, provider_code, error, body, dispatched_at, duplicates, from_duplicate, template_version FROM notifications`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]stored{}
	for rows.Next() {
		var id string
		var s stored
		if err := rows.Scan(&id, &s.status, &s.attempts, &s.providerCode, &s.errText, &s.body, &s.dispatchedAt, &s.duplicates, &s.fromDup, &s.tplVersion); err != nil {
			t.Fatal(err)
		}
		out[id] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func toStored(r domain.Row) stored {
	return stored{string(r.Status), r.Attempts, r.ProviderCode, r.Error, r.Body, r.DispatchedAt, r.Duplicates, r.Provisional, r.TemplateVersion}
}

// TestUpsertAppliesMerge is the contract between the SQL upsert and
// domain.Merge: random sequences of results (retries, duplicates, older
// attempts, redeliveries) written in random batches must leave exactly the
// rows that folding them with Merge in memory gives.
//
// It runs twice: with interpolated statements of random sizes, and with
// every batch but the last of Options.PreparedRows rows, so that they go
// through the prepared statement (binary protocol) and its duplicate-key
// fallback; on one connection, whose counters show that the statement was
// prepared once and executed for every full batch.
func TestUpsertAppliesMerge(t *testing.T) {
	t.Parallel()
	t.Run("interpolated", func(t *testing.T) {
		t.Parallel()
		testUpsertAppliesMerge(t, openStore(t), 0)
	})
	t.Run("prepared", func(t *testing.T) {
		t.Parallel()
		s := openStoreWith(t, Options{MaxConns: 1, PreparedRows: 7})
		before := stmtCounters(t, s)
		full := testUpsertAppliesMerge(t, s, 7)
		after := stmtCounters(t, s)
		if d := after.prepare - before.prepare; d != 1 {
			t.Errorf("the server prepared %d statements, want 1", d)
		}
		if d := after.execute - before.execute; d < full {
			t.Errorf("the server executed %d prepared statements for %d full batches", d, full)
		}
	})
}

// counters are a session's prepared-statement counters.
type counters struct{ prepare, execute, longData int }

// stmtCounters reads the prepared-statement counters of the session of a
// store opened with MaxConns 1 (its only connection).
func stmtCounters(t *testing.T, s *Store) counters {
	t.Helper()
	rows, err := s.DB().Query(`SHOW SESSION STATUS WHERE Variable_name IN ('Com_stmt_prepare', 'Com_stmt_execute', 'Com_stmt_send_long_data')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var c counters
	for rows.Next() {
		var name string
		var v int
		if err := rows.Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		switch name {
		case "Com_stmt_prepare":
			c.prepare = v
		case "Com_stmt_execute":
			c.execute = v
		case "Com_stmt_send_long_data":
			c.longData = v
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return c
}

// testUpsertAppliesMerge writes batches of size rows (random sizes when
// size is 0) and returns how many batches had size rows.
func testUpsertAppliesMerge(t *testing.T, s *Store, size int) int {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	statuses := []domain.Status{domain.StatusDelivered, domain.StatusFailed, domain.StatusRateLimited, domain.StatusCancelled}
	var all []*domain.Result
	for i := range 400 {
		id := fmt.Sprintf("n%03d", rng.IntN(60))
		var r *domain.Result
		if rng.IntN(4) == 0 {
			r = result(id, domain.StatusDuplicate, rng.IntN(20))
			if rng.IntN(5) > 0 {
				r.OriginalStatus = statuses[rng.IntN(len(statuses))]
			}
		} else {
			r = result(id, statuses[rng.IntN(len(statuses))], rng.IntN(20))
		}
		_ = i
		all = append(all, r)
	}
	// Redeliver a random prefix: the same results again.
	all = append(all, all[:rng.IntN(len(all))]...)

	want := map[string]domain.Row{}
	for _, r := range all {
		row := domain.RowOf(r)
		if prev, ok := want[r.NotificationID]; ok {
			row = domain.Merge(prev, row)
		}
		want[r.NotificationID] = row
	}
	full := 0 // batches of size rows
	for len(all) > 0 {
		n := min(1+rng.IntN(40), len(all))
		if size > 0 {
			// The shortest prefix that collapses to size rows (Collapse
			// merges repeated ids), or all that is left.
			n = min(size, len(all))
			for n < len(all) && len(domain.Collapse(all[:n])) < size {
				n++
			}
		}
		batch := domain.Collapse(all[:n])
		if len(batch) == size {
			full++
		}
		if err := s.Upsert(ctx, batch); err != nil {
			t.Fatal(err)
		}
		all = all[n:]
	}
	if size > 0 && full < 50 {
		t.Fatalf("only %d batches of %d rows", full, size)
	}
	got := readRows(t, s.DB())
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for id, w := range want {
		if g := got[id]; g != toStored(w) {
			t.Errorf("%s: got %+v\nwant %+v", id, g, toStored(w))
		}
	}
	return full
}

// TestUpsertStoresEveryColumnAsGiven writes the same rows, edge values
// included (a target id above MaxInt64, microsecond times, no run, 4-byte
// UTF-8, empty strings, a long body), once interpolated and once through
// the prepared statement (binary protocol), and reads every column back:
// both must store exactly what they were given. A third case writes them
// in a prepared batch of 200 rows, where the driver sends the long body
// apart from the statement's other values (COM_STMT_SEND_LONG_DATA: a
// value longer than max_allowed_packet / (placeholders + 1)).
func TestUpsertStoresEveryColumnAsGiven(t *testing.T) {
	t.Parallel()
	const longBody = 6000
	mk := func(n int) []domain.Row {
		var rs []*domain.Result
		for i := range n {
			r := result(fmt.Sprintf("col-%d", i), domain.StatusDelivered, i)
			r.OccurrenceAt = base.Add(time.Duration(i)*time.Hour + 123456*time.Microsecond)
			r.DueAt = r.OccurrenceAt.Add(-time.Microsecond)
			r.DispatchedAt = r.OccurrenceAt.Add(987654 * time.Microsecond)
			r.Sequence = uint64(i) << 40
			switch i {
			case 0:
				r.TargetID = math.MaxUint64 - 7
			case 1:
				r.RunID = ""
				r.Body = "📦 shipped — ünïcödé " + strings.Repeat("x", longBody)
			case 2:
				r.Error, r.TemplateVersion, r.RecipientID = "", "", "r"
				r.ProviderCode = -1
			}
			rs = append(rs, r)
		}
		rows := domain.Collapse(rs)
		for i := range rows {
			rows[i].Duplicates = i
			rows[i].Provisional = i == 3
		}
		return rows
	}
	for _, tc := range []struct {
		name     string
		rows     int
		opt      Options
		longData bool
	}{
		{"interpolated", 5, Options{MaxConns: 1}, false},
		{"prepared", 5, Options{MaxConns: 1, PreparedRows: 5}, false},
		{"prepared with long data", 200, Options{MaxConns: 1, PreparedRows: 200}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := openStoreWith(t, tc.opt)
			if tc.longData {
				var packet int
				if err := s.DB().QueryRow(`SELECT @@max_allowed_packet`).Scan(&packet); err != nil {
					t.Fatal(err)
				}
				if limit := packet / (tc.rows*upsertColumns + 1); longBody < limit {
					t.Fatalf("a %d-byte body is sent inline under max_allowed_packet %d: the case needs a longer one", longBody, packet)
				}
			}
			before := stmtCounters(t, s)
			want := mk(tc.rows)
			if err := s.Upsert(context.Background(), mk(tc.rows)); err != nil {
				t.Fatal(err)
			}
			after := stmtCounters(t, s)
			if got, wantPrepared := after.execute-before.execute, tc.opt.PreparedRows > 0; (got > 0) != wantPrepared {
				t.Errorf("%d prepared statements executed, want prepared %v", got, wantPrepared)
			}
			if got := after.longData - before.longData; (got > 0) != tc.longData {
				t.Errorf("%d values sent as long data, want long data %v", got, tc.longData)
			}
			got := readAllColumns(t, s.DB())
			if len(got) != len(want) {
				t.Fatalf("%d rows, want %d", len(got), len(want))
			}
			for _, w := range want {
				w.Sources = nil // which records a row came from is not stored
				if g, ok := got[w.NotificationID]; !ok || !reflect.DeepEqual(g, w) {
					t.Errorf("%s:\n got %+v\nwant %+v", w.NotificationID, g, w)
				}
			}
		})
	}
}

// readAllColumns reads back every column Upsert writes, by notification id.
func readAllColumns(t *testing.T, db *sql.DB) map[string]domain.Row {
	t.Helper()
	rows, err := db.Query(`SELECT notification_id, target_id, occurrence_at, recipient_id, sequence, channel, template_id,
		status, attempts, provider_code, error, body, run_id, due_at, dispatched_at, duplicates, from_duplicate, template_version
		FROM notifications`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]domain.Row{}
	for rows.Next() {
		var (
			r     domain.Row
			runID sql.NullString
		)
		if err := rows.Scan(&r.NotificationID, &r.TargetID, &r.OccurrenceAt, &r.RecipientID, &r.Sequence, &r.Channel,
			&r.TemplateID, &r.Status, &r.Attempts, &r.ProviderCode, &r.Error, &r.Body, &runID, &r.DueAt, &r.DispatchedAt,
			&r.Duplicates, &r.Provisional, &r.TemplateVersion); err != nil {
			t.Fatal(err)
		}
		r.RunID = runID.String
		out[r.NotificationID] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestUpsertPreparedFallsBackWhenServerRefuses writes a full batch while
// the server refuses to prepare another statement (error 1461, as when
// other clients hold the server's whole max_prepared_stmt_count): the
// batch is written interpolated, and the next one prepared again; so is
// an inbox batch inside its transaction. The
// refusal is injected: making the real server refuse means lowering a
// global limit under every other test that shares it. So this test covers
// what Upsert does with the error, not that a real refusal reaches it as
// a *mysql.MySQLError through database/sql's prepare: the driver returns the
// server's errors as that type, whichever command (prepare or execute)
// they answer.
func TestUpsertPreparedFallsBackWhenServerRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStoreWith(t, Options{MaxConns: 1, PreparedRows: 3})
	prepared := s.execPrepared
	refusals := 1
	s.execPrepared = func(ctx context.Context, tx *sql.Tx, args []any) error {
		if refusals > 0 {
			refusals--
			return fmt.Errorf("prepare: %w", &mysql.MySQLError{Number: 1461,
				Message: "Can't create more than max_prepared_stmt_count statements (current value: 0)"})
		}
		return prepared(ctx, tx, args)
	}
	batch := func(prefix string) []domain.Row {
		var rs []*domain.Result
		for i := range 3 {
			rs = append(rs, result(fmt.Sprintf("%s-%d", prefix, i), domain.StatusDelivered, 1))
		}
		return domain.Collapse(rs)
	}
	before := stmtCounters(t, s)
	if err := s.Upsert(ctx, batch("refused")); err != nil {
		t.Fatalf("upsert while the server refuses to prepare: %v", err)
	}
	if n := len(readRows(t, s.DB())); n != 3 {
		t.Fatalf("%d rows after the refused prepare, want 3", n)
	}
	if c := stmtCounters(t, s); c.execute != before.execute {
		t.Fatalf("%d prepared statements executed while the server refused", c.execute-before.execute)
	}
	if err := s.Upsert(ctx, batch("allowed")); err != nil {
		t.Fatalf("upsert once the server prepares again: %v", err)
	}
	if c := stmtCounters(t, s); c.execute-before.execute != 1 {
		t.Fatalf("%d prepared statements executed once the server prepares again, want 1", c.execute-before.execute)
	}
	if n := len(readRows(t, s.DB())); n != 6 {
		t.Fatalf("%d rows, want 6", n)
	}

	// The same in an inbox batch's transaction.
	refusals = 1
	inbox := batch("inbox")
	for i := range inbox {
		inbox[i].Channel = "inbox"
	}
	before = stmtCounters(t, s)
	if err := s.Upsert(ctx, inbox); err != nil {
		t.Fatalf("upsert of inbox rows while the server refuses to prepare: %v", err)
	}
	if c := stmtCounters(t, s); c.execute != before.execute {
		t.Fatalf("%d prepared statements executed in the transaction while the server refused", c.execute-before.execute)
	}
	var entries int
	if err := s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM inbox_entries`).Scan(&entries); err != nil || entries != 3 {
		t.Fatalf("%d inbox entries (%v), want 3", entries, err)
	}
	if n := len(readRows(t, s.DB())); n != 9 {
		t.Fatalf("%d rows, want 9", n)
	}
}

// TestOpenPreparesOnlyWhatFits: a row count whose INSERT would need more
// placeholders than a prepared statement can have is written
// interpolated, never prepared.
func TestOpenPreparesOnlyWhatFits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rows     int
		prepared bool
	}{{0, false}, {maxPlaceholders / upsertColumns, true}, {maxPlaceholders/upsertColumns + 1, false}} {
		s, err := Open(context.Background(), testkit.MySQLDSN(t), Options{MaxConns: 1, PreparedRows: tc.rows})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.execPrepared != nil; got != tc.prepared {
			t.Errorf("PreparedRows %d: prepared %v, want %v", tc.rows, got, tc.prepared)
		}
		_ = s.Close()
	}
}

// TestUpsertRejectsDataThatDoesNotFit: data the table cannot hold is
// rejected (poison, to be isolated by splitting), interpolated or through
// the prepared statement, and nothing of the statement is written.
func TestUpsertRejectsDataThatDoesNotFit(t *testing.T) {
	t.Parallel()
	t.Run("interpolated", func(t *testing.T) {
		t.Parallel()
		testUpsertRejects(t, openStore(t))
	})
	t.Run("prepared", func(t *testing.T) {
		t.Parallel()
		s := openStoreWith(t, Options{MaxConns: 1, PreparedRows: 2})
		before := stmtCounters(t, s)
		testUpsertRejects(t, s)
		if c := stmtCounters(t, s); c.execute-before.execute != 3 {
			t.Errorf("%d prepared statements executed, want 3", c.execute-before.execute)
		}
	})
}

func testUpsertRejects(t *testing.T, s *Store) {
	ctx := context.Background()
	tests := []struct {
		name string
		edit func(r *domain.Result)
	}{
		{"recipient too long", func(r *domain.Result) { r.RecipientID = strings.Repeat("r", 192) }},
		{"template too long", func(r *domain.Result) { r.TemplateID = strings.Repeat("t", 300) }},
		{"notification id not ascii", func(r *domain.Result) { r.NotificationID = "nö" }},
	}
	for _, tt := range tests {
		r := result("bad", domain.StatusDelivered, 1)
		tt.edit(r)
		err := s.Upsert(ctx, domain.Collapse([]*domain.Result{result("good", domain.StatusDelivered, 1), r}))
		if !IsRejected(err) {
			t.Errorf("%s: err = %v, want a rejected error", tt.name, err)
		}
	}
	if n := len(readRows(t, s.DB())); n != 0 {
		t.Fatalf("%d rows after rejected statements, want 0 (a statement is all or nothing)", n)
	}
}

func TestUpsertMissingTableIsTransient(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	if _, err := s.DB().Exec(`RENAME TABLE notifications TO notifications_away`); err != nil {
		t.Fatal(err)
	}
	err := s.Upsert(context.Background(), domain.Collapse([]*domain.Result{result("a", domain.StatusDelivered, 1)}))
	if err == nil || IsRejected(err) {
		t.Fatalf("err = %v, want a transient (not rejected) error", err)
	}
	if errors.Is(err, domain.ErrRejected) {
		t.Fatal("missing table must not count as poison")
	}
}

// TestMigrateUpgradesVersion1 upgrades a table made by version 1 with rows
// in it: the rows stay, the table is keyed by occurrence, the stored
// unread inbox rows are counted, and running the migration again changes
// nothing.
func TestMigrateUpgradesVersion1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStoreAt(t, Options{MaxConns: 2}, 1)
	rows := domain.Collapse([]*domain.Result{result("a", domain.StatusDelivered, 1), result("b", domain.StatusFailed, 2)})
	rows[1].Channel = "inbox" // counted unread by version 3
	for i := range rows {
		rows[i].TemplateVersion = "" // no such column before version 3
		args := AppendArgs(nil, &rows[i])
		if _, err := s.DB().ExecContext(ctx, `INSERT INTO notifications (notification_id, target_id, occurrence_at, recipient_id,
			sequence, channel, template_id, status, attempts, provider_code, error, body, run_id, due_at, dispatched_at, duplicates,
			from_duplicate) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, args[:17]...); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var pk string
	if err := s.DB().QueryRowContext(ctx, `SELECT GROUP_CONCAT(column_name ORDER BY seq_in_index) FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name = 'notifications' AND index_name = 'PRIMARY'`).Scan(&pk); err != nil {
		t.Fatal(err)
	}
	if pk != "target_id,occurrence_at" {
		t.Fatalf("primary key %q, want target_id,occurrence_at", pk)
	}
	got := readRows(t, s.DB())
	if len(got) != len(rows) {
		t.Fatalf("%d rows after the upgrade, want %d", len(got), len(rows))
	}
	var unread int
	if err := s.DB().QueryRowContext(ctx, `SELECT unread FROM inbox_unread WHERE recipient_id = ?`, rows[1].RecipientID).Scan(&unread); err != nil || unread != 1 {
		t.Fatalf("unread inbox count after the upgrade %d, %v; want the stored inbox row counted once", unread, err)
	}
	for _, r := range rows {
		if got[r.NotificationID] != toStored(r) {
			t.Errorf("%s after the upgrade: %+v, want %+v", r.NotificationID, got[r.NotificationID], toStored(r))
		}
	}
}

package adapters

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/mysqlx"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/sink/internal/domain"
	"github.com/notiflow/notiflow/services/sink/notifications"
)

func openStore(t *testing.T) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, testkit.MySQLDSN(t), Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
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
func TestUpsertAppliesMerge(t *testing.T) {
	t.Parallel()
	s := openStore(t)
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
	for len(all) > 0 {
		n := min(1+rng.IntN(40), len(all))
		if err := s.Upsert(ctx, domain.Collapse(all[:n])); err != nil {
			t.Fatal(err)
		}
		all = all[n:]
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
}

func TestUpsertRejectsDataThatDoesNotFit(t *testing.T) {
	t.Parallel()
	s := openStore(t)
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
	s, err := Open(ctx, testkit.MySQLDSN(t), Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := mysqlx.Migrate(ctx, s.DB(), notifications.MigrationTable, notifications.Migrations()[:1]); err != nil {
		t.Fatal(err)
	}
	rows := domain.Collapse([]*domain.Result{result("a", domain.StatusDelivered, 1), result("b", domain.StatusFailed, 2)})
	rows[1].Channel = "inbox" // counted unread by version 3
	for i := range rows {
		rows[i].TemplateVersion = "" // no such column before version 3
		args := AppendArgs(nil, &rows[i])
		if _, err := s.DB().ExecContext(ctx, `INSERT INTO notifications (notification_id, target_id, occurrence_at, recipient_id,
			sequence, channel, template_id, status, attempts, provider_code, error, body, run_id, due_at, dispatched_at, duplicates,
			from_duplicate) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, args[:len(args)-1]...); err != nil {
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

package adapters

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/sink/internal/domain"
	"github.com/notiflow/notiflow/services/sink/notifications"
)

// benchRows is how many rows each BenchmarkUpsert case writes
// (NOTIFLOW_BENCH_ROWS, default 50,000).
func benchRows() int {
	if n, err := strconv.Atoi(os.Getenv("NOTIFLOW_BENCH_ROWS")); err == nil && n > 0 {
		return n
	}
	return 50_000
}

func benchBatches(n, size int) [][]domain.Row { return benchBatchesInbox(n, size, 0, keyOrder) }

// rowShape is how benchBatchesInbox shapes its rows.
type rowShape int

const (
	// keyOrder: row j has notification id 01J8Z3-<j>-bench (ids in the
	// table's key order) and recipient user-<j mod 500, five digits>.
	keyOrder rowShape = iota
	// fanOut: rows shaped like make bench's fan-out: each id a version 8
	// UUID that starts with its occurrence's Unix milliseconds, then bits
	// of a SHA-256 of j, so ids sort by occurrence as the scheduler's
	// notification ids do (domain.NotificationID there), and ten rows per
	// recipient, recipient bench-run-<j mod n/10> (unpadded, as a
	// benchmark run's recipients).
	fanOut
	// fanOutHashed: fanOut with ids of SHA-256 bits alone, in no order
	// (domain.HashedNotificationID: the ids of outbox rows claimed under
	// the scheduler's schema version 10 or below).
	fanOutHashed
)

// benchBatchesInbox is benchBatches with every inboxEvery-th row (none
// when 0) of channel inbox, shaped as shape says.
func benchBatchesInbox(n, size, inboxEvery int, shape rowShape) [][]domain.Row {
	recipients := 500
	if shape != keyOrder {
		recipients = max(n/10, 1)
	}
	var out [][]domain.Row
	for i := 0; i < n; i += size {
		var rs []*domain.Result
		for j := i; j < min(i+size, n); j++ {
			at := base.Add(time.Duration(j) * time.Millisecond)
			id, recipient := fmt.Sprintf("01J8Z3-%010d-bench", j), fmt.Sprintf("user-%05d", j%recipients)
			if shape != keyOrder {
				id, recipient = fanOutID(j, at, shape == fanOutHashed), "bench-run-"+strconv.Itoa(j%recipients)
			}
			rs = append(rs, &domain.Result{
				NotificationID: id, TargetID: uint64(j), OccurrenceAt: at,
				RecipientID: recipient, Sequence: uint64(j), Channel: "sim", TemplateID: "order-shipped",
				Status: domain.StatusDelivered, Attempts: 1, ProviderCode: 200, RunID: "bench",
				Body:  fmt.Sprintf("Hello %s, your order %d has shipped and will arrive on Tuesday.", recipient, j),
				DueAt: at, DispatchedAt: at.Add(3 * time.Millisecond),
			})
		}
		if inboxEvery > 0 {
			for k, r := range rs {
				if (i+k)%inboxEvery == 0 {
					r.Channel = "inbox"
				}
			}
		}
		out = append(out, domain.Collapse(rs))
	}
	return out
}

// fanOutID is row j's notification id in the fan-out shapes: the first
// 16 bytes of SHA-256(j) as a version 8 UUID, its first 6 replaced with
// the Unix milliseconds of at unless hashed.
func fanOutID(j int, at time.Time, hashed bool) string {
	sum := sha256.Sum256(strconv.AppendInt(nil, int64(j), 10))
	u := sum[:16]
	if !hashed {
		ms := uint64(at.UnixMilli())
		for k := range 6 {
			u[k] = byte(ms >> (40 - 8*k))
		}
	}
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // variant 10
	h := hex.EncodeToString(u)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// notificationModel is the table as gorm's Create sees it (for the
// Create-with-OnConflict variant only).
type notificationModel struct {
	NotificationID string
	TargetID       uint64
	OccurrenceAt   time.Time
	RecipientID    string
	Sequence       uint64
	Channel        string
	TemplateID     string
	Status         string
	Attempts       uint32
	ProviderCode   int32
	Error          string
	Body           string
	RunID          *string
	DueAt          time.Time
	DispatchedAt   time.Time
	Duplicates     int
	FromDuplicate  bool
	WriterSchema   int
}

func (notificationModel) TableName() string { return "notifications" }

var onConflict = clause.OnConflict{DoUpdates: clause.Set{
	{Column: clause.Column{Name: "status"}, Value: gorm.Expr("IF(" + newerOrFirstReal + ", VALUES(status), status)")},
	{Column: clause.Column{Name: "attempts"}, Value: gorm.Expr("IF(" + newerOrFirstReal + ", VALUES(attempts), attempts)")},
	{Column: clause.Column{Name: "provider_code"}, Value: gorm.Expr("IF(" + newerOrFirstReal + ", VALUES(provider_code), provider_code)")},
	{Column: clause.Column{Name: "error"}, Value: gorm.Expr("IF(" + newerOrFirstReal + ", VALUES(error), error)")},
	{Column: clause.Column{Name: "body"}, Value: gorm.Expr("IF(" + newerOrFirstReal + ", VALUES(body), body)")},
	{Column: clause.Column{Name: "duplicates"}, Value: gorm.Expr("duplicates + VALUES(duplicates)")},
	{Column: clause.Column{Name: "dispatched_at"}, Value: gorm.Expr("IF(" + newerOrFirstReal + ", VALUES(dispatched_at), dispatched_at)")},
	{Column: clause.Column{Name: "from_duplicate"}, Value: gorm.Expr("IF(VALUES(from_duplicate) = 0, 0, from_duplicate)")},
}}

func (s *Store) upsertCreate(ctx context.Context, rows []domain.Row) error {
	ms := make([]notificationModel, len(rows))
	for i, r := range rows {
		m := notificationModel{r.NotificationID, r.TargetID, r.OccurrenceAt, r.RecipientID, r.Sequence, r.Channel, r.TemplateID,
			string(r.Status), r.Attempts, r.ProviderCode, r.Error, r.Body, nil, r.DueAt, r.DispatchedAt, r.Duplicates, r.Provisional,
			notifications.WriterSchema}
		if r.RunID != "" {
			m.RunID = &r.RunID
		}
		ms[i] = m
	}
	return s.gdb.WithContext(ctx).Clauses(onConflict).Create(&ms).Error
}

// upsertVersion3 writes rows as schema version 3's sink did, inbox rows
// too: one autocommit statement (prepared at the prepared size), no inbox
// entries.
func (s *Store) upsertVersion3(ctx context.Context, rows []domain.Row) error {
	args := make([]any, 0, len(rows)*upsertColumns)
	for i := range rows {
		args = AppendArgs(args, &rows[i])
	}
	return s.write(s.gdb.WithContext(ctx), nil, args, len(rows))
}

func (s *Store) upsertRaw(ctx context.Context, rows []domain.Row) error {
	args := make([]any, 0, len(rows)*upsertColumns)
	for i := range rows {
		args = AppendArgs(args, &rows[i])
	}
	q := s.statements(len(rows))
	_, err := s.db.ExecContext(ctx, q.insert, args...)
	if isDuplicateKey(err) {
		_, err = s.db.ExecContext(ctx, q.upsert, args...)
	}
	return err
}

// BenchmarkUpsert compares ways of writing 200-row batches, each into a
// fresh table: gorm Exec with the prebuilt statement, sent interpolated or
// (exec-prepared, what the sink does with full batches: a database/sql statement) kept prepared
// per connection; gorm Create with clause.OnConflict; and database/sql
// directly; with interpolateParams on and off; on 1, 2 and 4 connections.
// Besides the client's CPU per row it reports the database server's when
// the server runs on this machine. Run with -benchtime=1x: each case
// writes NOTIFLOW_BENCH_ROWS rows once.
func BenchmarkUpsert(b *testing.B) {
	n := benchRows()
	batches := benchBatches(n, 200)
	modes := []struct {
		name     string
		fn       func(*Store, context.Context, []domain.Row) error
		prepared int // Options.PreparedRows
	}{
		{"gorm-exec", (*Store).Upsert, 0},
		{"exec-prepared", (*Store).Upsert, 200},
		{"gorm-create", (*Store).upsertCreate, 0},
		{"raw", (*Store).upsertRaw, 0},
	}
	for _, mode := range modes {
		for _, interp := range []bool{true, false} {
			for _, conns := range []int{1, 2, 4} {
				if mode.name == "gorm-create" && conns != 2 || mode.prepared > 0 && !interp {
					continue
				}
				b.Run(fmt.Sprintf("%s/interpolate=%v/conns=%d", mode.name, interp, conns), func(b *testing.B) {
					s, err := Open(context.Background(), testkit.MySQLDSN(b), Options{MaxConns: conns, NoInterpolate: !interp, PreparedRows: mode.prepared})
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					if err := s.Migrate(context.Background()); err != nil {
						b.Fatal(err)
					}
					measureWrites(b, s, batches, conns, mode.fn)
				})
			}
		}
	}
}

// measureWrites writes batches with fn on conns connections once per
// iteration, truncating the table after each, and reports rows/s, the
// client's CPU per row and, when the server runs here, the server's.
func measureWrites(b *testing.B, s *Store, batches [][]domain.Row, conns int, fn func(*Store, context.Context, []domain.Row) error) {
	n := 0
	for _, rows := range batches {
		n += len(rows)
	}
	srv := testkit.LocalMySQLServer(context.Background(), s.DB())
	b.ResetTimer()
	for b.Loop() {
		cpu, server := selfCPU(), srv.CPU()
		elapsed := writeAll(b, s, batches, conns, fn)
		b.ReportMetric(float64(n)/elapsed.Seconds(), "rows/s")
		b.ReportMetric(float64((selfCPU()-cpu).Microseconds())/float64(n), "client-CPU-us/row")
		if srv.Local() {
			b.ReportMetric(float64((srv.CPU()-server).Microseconds())/float64(n), "server-CPU-us/row")
		}
		truncate(b, s.db)
	}
}

// BenchmarkUpsertSchemaCost is what each part of the notifications
// table's write path costs the sink's write (full 200-row batches through
// the prepared statement, two connections, sim rows): the table as
// migrated, the same table without one of its secondary indexes, and the
// table as schema version 3 had it (an inbox index on every row and the
// inbox counter's insert trigger, which ran for every row whatever its
// channel, before inbox rows got their own table); the /inbox-third cases
// write batches of which a third are inbox rows, as migrated (their
// entries in inbox_entries, in the batch's transaction) and as version 3
// (the index and trigger of notifications itself). Run with -benchtime=1x;
// alternate -count runs.
//
// The fan-out/ cases write rows shaped like make bench's fan-out
// (benchBatchesInbox): notification ids in occurrence order as the
// scheduler makes them, or, for fan-out/hashed-ids, in no order (the
// hashed ids of rows claimed under the scheduler's schema version 10 or
// below); ten rows per recipient.
// Comparing their cost per row at NOTIFLOW_BENCH_ROWS=100000 and 1000000
// shows which index makes a row of a larger table cost more.
func BenchmarkUpsertSchemaCost(b *testing.B) {
	const (
		dropUnique    = "ALTER TABLE notifications DROP INDEX uq_notifications_notification"
		dropRecipient = "ALTER TABLE notifications DROP INDEX idx_notifications_recipient"
	)
	n := benchRows()
	version3 := []string{
		"ALTER TABLE notifications ADD INDEX bench_inbox (recipient_id, channel, persisted_at)",
		`CREATE TRIGGER bench_inbox_insert AFTER INSERT ON notifications FOR EACH ROW
			IF NEW.channel = 'inbox' THEN
				INSERT INTO inbox_unread (recipient_id, unread) VALUES (NEW.recipient_id, 1)
					ON DUPLICATE KEY UPDATE unread = unread + 1;
			END IF`,
	}
	for _, tc := range []struct {
		name       string
		change     []string
		inboxEvery int
		shape      rowShape
		write      func(*Store, context.Context, []domain.Row) error
	}{
		{"as-migrated", nil, 0, keyOrder, (*Store).Upsert},
		{"without-unique-notification-id", []string{dropUnique}, 0, keyOrder, (*Store).Upsert},
		{"without-recipient-index", []string{dropRecipient}, 0, keyOrder, (*Store).Upsert},
		{"with-version-3-inbox-index-and-trigger", version3, 0, keyOrder, (*Store).Upsert},
		{"as-migrated/inbox-third", nil, 3, keyOrder, (*Store).Upsert},
		{"with-version-3-inbox-index-and-trigger/inbox-third", version3, 3, keyOrder, (*Store).upsertVersion3},
		{"fan-out/as-migrated", nil, 0, fanOut, (*Store).Upsert},
		{"fan-out/hashed-ids", nil, 0, fanOutHashed, (*Store).Upsert},
		{"fan-out/without-unique-notification-id", []string{dropUnique}, 0, fanOut, (*Store).Upsert},
		{"fan-out/without-recipient-index", []string{dropRecipient}, 0, fanOut, (*Store).Upsert},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := Open(context.Background(), testkit.MySQLDSN(b), Options{MaxConns: 2, PreparedRows: 200})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.Migrate(context.Background()); err != nil {
				b.Fatal(err)
			}
			for _, q := range tc.change {
				if _, err := s.DB().Exec(q); err != nil {
					b.Fatalf("%s: %v", q, err)
				}
			}
			measureWrites(b, s, benchBatchesInbox(n, 200, tc.inboxEvery, tc.shape), 2, tc.write)
		})
	}
}

func writeAll(b *testing.B, s *Store, batches [][]domain.Row, conns int, fn func(*Store, context.Context, []domain.Row) error) time.Duration {
	ch := make(chan []domain.Row)
	var wg sync.WaitGroup
	start := time.Now()
	for range conns {
		wg.Go(func() {
			for rows := range ch {
				if err := fn(s, context.Background(), rows); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for _, rows := range batches {
		ch <- rows
	}
	close(ch)
	wg.Wait()
	return time.Since(start)
}

func truncate(b *testing.B, db *sql.DB) {
	b.StopTimer()
	for _, table := range []string{"notifications", "inbox_entries", "inbox_unread"} {
		if _, err := db.Exec(`TRUNCATE TABLE ` + table); err != nil {
			b.Fatal(err)
		}
	}
	b.StartTimer()
}

// selfCPU is this process's CPU time (user + system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

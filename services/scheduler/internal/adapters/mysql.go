package adapters

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// insertChunk is the most rows one multi-row INSERT carries. A fixed size
// keeps statements well under max_allowed_packet and the placeholder limit.
const insertChunk = 1000

// MySQLStore keeps targets and the outbox in MySQL 8.4 or MariaDB 10.11
// (both support FOR UPDATE SKIP LOCKED). It is safe for concurrent use.
type MySQLStore struct {
	gdb *gorm.DB
	db  *sql.DB
	// autoIncStep is @@auto_increment_increment, the distance between the
	// ids of one multi-row INSERT.
	autoIncStep int64
	schedules   scheduleCache

	// BeforeClaimCommit, when set, runs inside every claim transaction
	// after the outbox rows are written and before the commit; an error
	// rolls the claim back. It is a fault-injection point for tests; nil
	// in production.
	BeforeClaimCommit func(ctx context.Context) error
}

// NormalizeDSN returns dsn with the settings the store relies on:
// parseTime and loc=UTC (times are stored as UTC DATETIME(6)) and
// interpolateParams (one round trip per statement instead of a
// prepare/execute/close cycle).
func NormalizeDSN(dsn string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("parse mysql dsn: %w", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
	return cfg.FormatDSN(), nil
}

// OpenMySQL connects to the database of dsn with at most maxConns
// connections and checks that it answers. It does not migrate.
func OpenMySQL(ctx context.Context, dsn string, maxConns int) (*MySQLStore, error) {
	dsn, err := NormalizeDSN(dsn)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, fmt.Errorf("open mysql: %w", err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	gdb, err := gorm.Open(gormmysql.New(gormmysql.Config{Conn: db}), &gorm.Config{
		SkipDefaultTransaction: true,
		Logger:                 logger.Discard,
		NowFunc:                func() time.Time { return time.Now().UTC() },
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open gorm: %w", err)
	}
	s := &MySQLStore{gdb: gdb, db: db}
	if err := db.QueryRowContext(ctx, `SELECT @@auto_increment_increment`).Scan(&s.autoIncStep); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connect to mysql: %w", err)
	}
	return s, nil
}

// Close closes the connection pool.
func (s *MySQLStore) Close() error { return s.db.Close() }

// Ping checks that the database answers (readiness).
func (s *MySQLStore) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// DB is the underlying pool, for tests and tools.
func (s *MySQLStore) DB() *sql.DB { return s.db }

// targetRow is notification_targets as gorm sees it.
type targetRow struct {
	ID           int64
	RecipientID  string
	Channel      string
	WebhookURL   sql.NullString
	TemplateID   string
	Params       []byte
	ScheduleKind string
	DueAt        sql.NullTime
	CronExpr     sql.NullString
	TimeZone     sql.NullString
	NextRunAt    time.Time
	Status       string
	RunID        sql.NullString
	CreatedAt    time.Time
	UpdatedAt    time.Time
	Version      uint64
	// Fired is set by reads that select withFired: an active one-shot
	// without a due-queue entry has been claimed and is done.
	Fired bool `gorm:"->"`
}

func (targetRow) TableName() string { return "notification_targets" }

// fired is the SQL condition that target row t (a table name or alias)
// is a one-shot that fired but is not settled yet: stored active, without
// a due-queue entry. A one-shot's claim deletes its entry without touching
// the target (see BeginClaim).
func fired(t string) string {
	return `(` + t + `.schedule_kind = 'once' AND ` + t + `.status = 'active'
		AND NOT EXISTS (SELECT 1 FROM target_due d WHERE d.next_run_at = ` + t + `.next_run_at AND d.target_id = ` + t + `.id))`
}

// withFired selects a target with its Fired flag: until SettleOneShots
// stores "done", this is how reads tell.
func withFired(db *gorm.DB) *gorm.DB {
	return db.Select(`notification_targets.*, ` + fired("notification_targets") + ` AS fired`)
}

// toDomain rebuilds a target; the error says that its stored schedule no
// longer parses (e.g. a time zone missing from this host's database).
func (s *MySQLStore) toDomain(r *targetRow) (domain.Target, error) {
	t := domain.Target{
		ID:          r.ID,
		RecipientID: r.RecipientID,
		Channel:     domain.Channel(r.Channel),
		WebhookURL:  r.WebhookURL.String,
		TemplateID:  r.TemplateID,
		Params:      r.Params,
		NextRunAt:   r.NextRunAt.UTC(),
		Status:      domain.Status(r.Status),
		RunID:       r.RunID.String,
		CreatedAt:   r.CreatedAt.UTC(),
		UpdatedAt:   r.UpdatedAt.UTC(),
		Version:     r.Version,
	}
	if r.Fired {
		t.Status = domain.StatusDone
	}
	switch domain.Kind(r.ScheduleKind) {
	case domain.KindOnce:
		t.Schedule = domain.OneShot(r.DueAt.Time)
	case domain.KindCron:
		sched, err := s.schedules.parse(r.CronExpr.String, r.TimeZone.String)
		if err != nil {
			return t, fmt.Errorf("target %d: %w", r.ID, err)
		}
		t.Schedule = sched
	default:
		return t, fmt.Errorf("target %d: unknown schedule kind %q", r.ID, r.ScheduleKind)
	}
	return t, nil
}

// scheduleCache memoises parsed cron schedules: parsing, and above all
// loading a time zone from the tz database, is too slow for every claimed
// row.
type scheduleCache struct {
	mu sync.Mutex
	m  map[[2]string]domain.Schedule
}

func (c *scheduleCache) parse(expr, zone string) (domain.Schedule, error) {
	key := [2]string{expr, zone}
	c.mu.Lock()
	s, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := domain.ParseCron(expr, zone)
	if err != nil {
		return s, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= 10000 {
		c.m = make(map[[2]string]domain.Schedule)
	}
	c.m[key] = s
	c.mu.Unlock()
	return s, nil
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// placeholders returns "(?,?,...),(?,?,...)" for rows rows of cols columns.
func placeholders(b *strings.Builder, rows, cols int) {
	one := "(" + strings.Repeat("?,", cols-1) + "?)"
	for i := 0; i < rows; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(one)
	}
}

// dueEntry is a row of the due queue (table target_due): when target id
// is next due; for a one-shot (oneShot) also its run, which is all its
// claim needs (see BeginClaim).
type dueEntry struct {
	at      time.Time
	id      int64
	oneShot bool
	runID   string
}

// queueEntry is the due-queue entry of target t with the given id, due at
// t.NextRunAt.
func queueEntry(t domain.Target, id int64) dueEntry {
	return dueEntry{at: t.NextRunAt, id: id, oneShot: t.Schedule.Kind() == domain.KindOnce, runID: t.RunID}
}

// queueEntry is the due-queue entry of the stored target, due at its
// next_run_at.
func (r *targetRow) queueEntry() dueEntry {
	return dueEntry{at: r.NextRunAt, id: r.ID, oneShot: r.ScheduleKind == string(domain.KindOnce), runID: r.RunID.String}
}

// sqlExecer is what enqueueDue needs of a transaction.
type sqlExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// enqueueDue adds entries to the due queue with multi-row INSERTs; an
// entry already there is kept.
func enqueueDue(ctx context.Context, tx sqlExecer, entries []dueEntry) error {
	for start := 0; start < len(entries); start += insertChunk {
		chunk := entries[start:min(start+insertChunk, len(entries))]
		var b strings.Builder
		b.WriteString(`INSERT INTO target_due (next_run_at, target_id, one_shot, run_id) VALUES `)
		placeholders(&b, len(chunk), 4)
		b.WriteString(` ON DUPLICATE KEY UPDATE target_id = target_id`) // the same entry: a target's kind and run never change
		args := make([]any, 0, 4*len(chunk))
		for _, e := range chunk {
			args = append(args, e.at, e.id, e.oneShot, nullString(e.runID))
		}
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("queue %d due targets: %w", len(chunk), err)
		}
	}
	return nil
}

func inList(b *strings.Builder, n int) {
	b.WriteByte('(')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('?')
	}
	b.WriteByte(')')
}

// CreateTargets inserts targets in one transaction, all or none, with
// multi-row INSERTs of up to 1,000 rows, and returns their ids in order.
// Each target's CreatedAt and UpdatedAt must be set; its ID is ignored. A
// target's WebhookSecret, when set, is stored in webhook_secrets in the
// same transaction.
func (s *MySQLStore) CreateTargets(ctx context.Context, targets []domain.Target) ([]int64, error) {
	if len(targets) == 0 {
		return nil, nil
	}
	ids := make([]int64, 0, len(targets))
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("create targets: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	const cols = 14
	for start := 0; start < len(targets); start += insertChunk {
		chunk := targets[start:min(start+insertChunk, len(targets))]
		var b strings.Builder
		b.WriteString(`INSERT INTO notification_targets (recipient_id, channel, webhook_url, template_id, params,
			schedule_kind, due_at, cron_expr, time_zone, next_run_at, status, run_id, created_at, updated_at) VALUES `)
		placeholders(&b, len(chunk), cols)
		args := make([]any, 0, len(chunk)*cols)
		for _, t := range chunk {
			var due sql.NullTime
			if t.Schedule.Kind() == domain.KindOnce {
				due = sql.NullTime{Time: t.Schedule.DueAt(), Valid: true}
			}
			args = append(args, t.RecipientID, string(t.Channel), nullString(t.WebhookURL), t.TemplateID, t.Params,
				string(t.Schedule.Kind()), due, nullString(t.Schedule.Expr()), nullString(t.Schedule.Zone()),
				t.NextRunAt, string(t.Status), nullString(t.RunID), t.CreatedAt, t.UpdatedAt)
		}
		res, err := tx.ExecContext(ctx, b.String(), args...)
		if err != nil {
			return nil, fmt.Errorf("create targets: insert: %w", err)
		}
		first, err := res.LastInsertId()
		if err != nil {
			return nil, fmt.Errorf("create targets: read ids: %w", err)
		}
		// A multi-row INSERT with a known row count gets consecutive
		// auto-increment values (spaced by auto_increment_increment) in
		// every innodb_autoinc_lock_mode; LAST_INSERT_ID is the first.
		var queued []dueEntry
		for i, t := range chunk {
			id := first + int64(i)*s.autoIncStep
			ids = append(ids, id)
			if t.Status == domain.StatusActive {
				queued = append(queued, queueEntry(t, id))
			}
		}
		if err := enqueueDue(ctx, tx, queued); err != nil {
			return nil, fmt.Errorf("create targets: %w", err)
		}
		if err := insertSecrets(ctx, tx, chunk, ids[start:]); err != nil {
			return nil, fmt.Errorf("create targets: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("create targets: commit: %w", err)
	}
	return ids, nil
}

// GetTarget returns the target id, or an error wrapping domain.ErrNotFound
// when it does not exist or was deleted.
func (s *MySQLStore) GetTarget(ctx context.Context, id int64) (domain.Target, error) {
	var r targetRow
	err := s.gdb.WithContext(ctx).Scopes(withFired).Where("id = ? AND status <> ?", id, string(domain.StatusDeleted)).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return domain.Target{}, fmt.Errorf("get target %d: %w", id, domain.ErrNotFound)
	}
	if err != nil {
		return domain.Target{}, fmt.Errorf("get target %d: %w", id, err)
	}
	return s.toDomain(&r)
}

// ListTargets returns up to limit targets with an id above afterID, in id
// order, leaving out deleted ones (keyset pagination).
func (s *MySQLStore) ListTargets(ctx context.Context, afterID int64, limit int) ([]domain.Target, error) {
	var rows []targetRow
	err := s.gdb.WithContext(ctx).Scopes(withFired).
		Where("id > ? AND status <> ?", afterID, string(domain.StatusDeleted)).
		Order("id").Limit(limit).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("list targets after %d: %w", afterID, err)
	}
	out := make([]domain.Target, 0, len(rows))
	for i := range rows {
		t, err := s.toDomain(&rows[i])
		if err != nil {
			return nil, fmt.Errorf("list targets: %w", err)
		}
		out = append(out, t)
	}
	return out, nil
}

// CountTargets returns the number of targets of a benchmark run ("" counts
// all targets).
func (s *MySQLStore) CountTargets(ctx context.Context, runID string) (int64, error) {
	q := s.gdb.WithContext(ctx).Model(&targetRow{})
	if runID != "" {
		q = q.Where("run_id = ?", runID)
	}
	var n int64
	if err := q.Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count targets: %w", err)
	}
	return n, nil
}

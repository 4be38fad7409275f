package adapters

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/notiflow/notiflow/services/sink/internal/domain"
	"github.com/notiflow/notiflow/services/sink/notifications"
)

// strictSQLMode is the session sql_mode: strict, so that a value that does
// not fit its column is an error (the row goes to the DLQ) instead of being
// silently cut, whatever the server's default.
const strictSQLMode = "'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'"

// NormalizeDSN returns dsn with the settings the store relies on: parseTime
// and loc=UTC (times are stored as UTC DATETIME(6)), a strict session
// sql_mode, the server's own max_allowed_packet (so that an oversized batch
// fails in the driver with ErrPktTooLarge and gets split, instead of
// breaking the connection), a dial timeout, and interpolateParams
// (measured faster: one round trip per INSERT instead of
// prepare/execute/close; see README.md).
func NormalizeDSN(dsn string, interpolate bool) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("parse mysql dsn: %w", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = interpolate
	cfg.MaxAllowedPacket = 0
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["sql_mode"] = strictSQLMode
	return cfg.FormatDSN(), nil
}

// Store writes notification rows to MySQL 8.4 or MariaDB 10.11 through
// gorm. It is safe for concurrent use.
type Store struct {
	gdb *gorm.DB
	db  *sql.DB
	sql sync.Map // row count -> statementPair
	// prepared is the plain INSERT of preparedRows rows as a server-side
	// prepared statement (database/sql prepares it once per connection and
	// keeps it while the connection lives); execPrepared runs it with
	// args, inside tx unless tx is nil. Both are nil when there is none
	// (preparedRows 0).
	prepared      atomic.Pointer[sql.Stmt]
	prepareMu     sync.Mutex
	prepareFailed atomic.Int64 // unix nanos of the last failed prepare (0: none)
	execPrepared  func(ctx context.Context, tx *sql.Tx, args []any) error
	preparedRows  int
}

// maxPlaceholders is the most placeholders a prepared statement may have
// (the protocol counts them in 16 bits).
const maxPlaceholders = 65535

// Options tune Open.
type Options struct {
	// MaxConns bounds the pool: flush concurrency plus one for health
	// checks is enough.
	MaxConns int
	// NoInterpolate switches interpolateParams off (server-side prepared
	// statements); for benchmarks.
	NoInterpolate bool
	// PreparedRows is the row count (the sink's batch size) whose plain
	// INSERT runs as a server-side prepared statement, prepared once per
	// connection and then executed with the binary protocol: MariaDB
	// parses the statement of 19 placeholders a row once instead of a
	// statement of as many literals per batch (a sixth less of its CPU per
	// row at 200 rows, BenchmarkUpsert). Other row counts (partial batches
	// at low load, halves of a rejected batch) and the merging retry stay
	// interpolated, so the store keeps one prepared statement per open
	// connection. 0, or more rows than a prepared statement can have
	// placeholders for (65,535): none.
	PreparedRows int
}

// Open connects to the database of dsn and checks that it answers. It does
// not migrate.
func Open(ctx context.Context, dsn string, opt Options) (*Store, error) {
	dsn, err := NormalizeDSN(dsn, !opt.NoInterpolate)
	if err != nil {
		return nil, err
	}
	if opt.MaxConns < 1 {
		opt.MaxConns = 4
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, fmt.Errorf("open mysql: %w", err)
	}
	db.SetMaxOpenConns(opt.MaxConns)
	db.SetMaxIdleConns(opt.MaxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	gdb, err := gorm.Open(gormmysql.New(gormmysql.Config{Conn: db, SkipInitializeWithVersion: true}), &gorm.Config{
		SkipDefaultTransaction: true,
		Logger:                 logger.Discard,
		NowFunc:                func() time.Time { return time.Now().UTC() },
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open gorm: %w", err)
	}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connect to mysql: %w", err)
	}
	s := &Store{gdb: gdb, db: db}
	if opt.PreparedRows > 0 && opt.PreparedRows*upsertColumns <= maxPlaceholders {
		s.preparedRows = opt.PreparedRows
		s.execPrepared = func(ctx context.Context, tx *sql.Tx, args []any) error {
			if tx == nil {
				st, err := s.preparedStmt(ctx)
				if err != nil {
					return err
				}
				_, err = st.ExecContext(ctx, args...)
				return err
			}
			st := s.prepared.Load()
			if st == nil {
				return errNotPrepared
			}
			// The transaction's connection's own statement (prepared on it
			// once, then reused); closed with the transaction.
			_, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...)
			return err
		}
	}
	return s, nil
}

// errNotPrepared: the INSERT is not prepared (a transaction's write found it
// not prepared yet: preparing it would need a second connection; or a
// prepare failed less than prepareRetry ago).
var errNotPrepared = errors.New("the insert is not prepared")

// prepareRetry is how long after a failed prepare batches go interpolated
// without trying again (so that flushers do not queue on the mutex for a
// prepare the server keeps refusing).
const prepareRetry = 5 * time.Second

// preparedStmt returns the prepared INSERT of preparedRows rows, preparing
// it on first use (the table may not exist before Migrate); within
// prepareRetry of a failed prepare it answers errNotPrepared.
func (s *Store) preparedStmt(ctx context.Context) (*sql.Stmt, error) {
	if st := s.prepared.Load(); st != nil {
		return st, nil
	}
	if failed := s.prepareFailed.Load(); failed != 0 && time.Since(time.Unix(0, failed)) < prepareRetry {
		return nil, errNotPrepared
	}
	s.prepareMu.Lock()
	defer s.prepareMu.Unlock()
	if st := s.prepared.Load(); st != nil {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, s.statements(s.preparedRows).insert)
	if err != nil {
		s.prepareFailed.Store(time.Now().UnixNano())
		return nil, fmt.Errorf("prepare the insert of %d rows: %w", s.preparedRows, err)
	}
	s.prepared.Store(st)
	return st, nil
}

// Close closes the prepared statement and the connection pool.
func (s *Store) Close() error {
	if st := s.prepared.Load(); st != nil {
		_ = st.Close()
	}
	return s.db.Close()
}

// Ping checks that the database answers (readiness).
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// DB is the underlying pool, for tests and tools.
func (s *Store) DB() *sql.DB { return s.db }

// Upsert writes rows in one multi-row INSERT (prepared when there are
// Options.PreparedRows of them), applying domain.Merge on the notification
// id: an autocommit statement, or, when the batch has inbox rows, a
// transaction that also writes their inbox entries (writeInbox;
// notifications.Migrate, inbox_entries). It first tries a plain
// INSERT: in the normal flow every result is new, and the plain INSERT
// costs MariaDB about a fifth less CPU than INSERT ... ON DUPLICATE KEY
// UPDATE (measured). When any row already exists the server rejects the
// whole statement with a duplicate-key error and writes nothing; Upsert
// then writes the same rows with the merging statement (see UpsertSQL).
// rows must not repeat a notification id (use domain.Collapse). Writing
// the same rows again leaves the table as it was, apart from the
// duplicates counter of duplicate rows.
//
// An error wraps domain.ErrRejected when MySQL refused the data itself
// (a value too long, an invalid value, a statement too large for the
// server): splitting the batch can isolate the culprit. Any other error
// (connection lost, server down, timeout, lock wait, missing table) is
// transient: retry the same rows later. When ctx ends the statement is
// abandoned; it may still have committed, which a retry absorbs.
func (s *Store) Upsert(ctx context.Context, rows []domain.Row) error {
	if len(rows) == 0 {
		return nil
	}
	inbox := 0
	for i := range rows {
		if rows[i].Channel == notifications.ChannelInbox {
			inbox++
		}
	}
	var err error
	if inbox == 0 {
		args := make([]any, 0, len(rows)*upsertColumns)
		for i := range rows {
			args = AppendArgs(args, &rows[i])
		}
		err = s.write(s.gdb.WithContext(ctx), nil, args, len(rows))
	} else {
		if s.execPrepared != nil && len(rows) == s.preparedRows {
			// Prepared on the pool first: inside the transaction it needs
			// no connection besides the transaction's own.
			_, _ = s.preparedStmt(ctx)
		}
		err = s.gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			return s.writeInbox(tx, rows, inbox)
		})
	}
	if err != nil {
		return classify(fmt.Errorf("upsert %d notification row(s): %w", len(rows), err))
	}
	return nil
}

// write writes rows rows with args on db (in the transaction sqlTx, which
// is db's, unless it is nil): the plain INSERT, prepared when rows is the
// prepared size, then the merging statement when a row exists already
// (inside a transaction the failed INSERT is rolled back alone).
func (s *Store) write(db *gorm.DB, sqlTx *sql.Tx, args []any, rows int) error {
	q := s.statements(rows)
	var err error
	prepared := s.execPrepared != nil && rows == s.preparedRows
	if prepared {
		err = s.execPrepared(db.Statement.Context, sqlTx, args)
	}
	if !prepared || isPreparedLimit(err) || errors.Is(err, errNotPrepared) {
		// Not the prepared size, the server refuses another prepared
		// statement (max_prepared_stmt_count), or a transaction found none
		// prepared: interpolated.
		err = db.Exec(q.insert, args...).Error
	}
	if isDuplicateKey(err) {
		err = db.Exec(q.upsert, args...).Error
	}
	return err
}

// writeInbox writes rows, inbox of which are inbox rows, in the
// transaction tx: it reads the server's CURRENT_TIMESTAMP(6) (what
// persisted_at would get), writes the rows with it as persisted_at, then
// the inbox rows' entries with the same arrival time. An entry that
// exists already (a duplicate result) is kept as it is, read state
// included, as is its row's persisted_at.
func (s *Store) writeInbox(tx *gorm.DB, rows []domain.Row, inbox int) error {
	var at time.Time
	if err := tx.Raw(`SELECT CURRENT_TIMESTAMP(6)`).Row().Scan(&at); err != nil {
		return fmt.Errorf("read the server's time: %w", err)
	}
	args := make([]any, 0, len(rows)*upsertColumns)
	entries := make([]any, 0, inbox*4)
	for i := range rows {
		r := &rows[i]
		args = AppendArgs(args, r)
		args[len(args)-1] = at // persisted_at
		if r.Channel == notifications.ChannelInbox {
			entries = append(entries, u64(r.TargetID), r.OccurrenceAt.UTC(), r.RecipientID, at)
		}
	}
	sqlTx, _ := tx.Statement.ConnPool.(*sql.Tx) // gorm's transaction over database/sql
	if sqlTx == nil {
		return errors.New("write inbox rows: the transaction is not a database/sql one")
	}
	if err := s.write(tx, sqlTx, args, len(rows)); err != nil {
		return err
	}
	if err := tx.Exec(inboxEntriesSQL(inbox), entries...).Error; err != nil {
		return fmt.Errorf("write %d inbox entries: %w", inbox, err)
	}
	return nil
}

// inboxEntriesSQL writes n inbox entries (target id, occurrence time,
// recipient, arrival time), keeping those that exist.
func inboxEntriesSQL(n int) string {
	return `INSERT IGNORE INTO inbox_entries (target_id, occurrence_at, recipient_id, persisted_at) VALUES ` +
		strings.TrimSuffix(strings.Repeat("(?,?,?,?),", n), ",")
}

// statementPair is the plain and the merging statement for one row count.
type statementPair struct{ insert, upsert string }

func (s *Store) statements(n int) statementPair {
	if q, ok := s.sql.Load(n); ok {
		return q.(statementPair)
	}
	up := UpsertSQL(n)
	q := statementPair{insert: up[:len(up)-len(upsertSuffix)], upsert: up}
	s.sql.Store(n, q)
	return q
}

// isPreparedLimit reports whether err is the server's refusal to prepare
// another statement (1461, max_prepared_stmt_count reached).
func isPreparedLimit(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1461
}

// isDuplicateKey reports whether err is MySQL's duplicate-key error (1062).
func isDuplicateKey(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

// upsertColumns is the number of values per row (AppendArgs), the last one
// the row's arrival time (persisted_at; nil: the server's current time).
const upsertColumns = 19

// insertPrefix names the columns of a row's values, then writer_schema,
// which each row's tuple sets to notifications.WriterSchema.
const insertPrefix = `INSERT INTO notifications (notification_id, target_id, occurrence_at, recipient_id, sequence, channel,
 template_id, status, attempts, provider_code, error, body, run_id, due_at, dispatched_at, duplicates, from_duplicate, template_version,
 persisted_at, writer_schema) VALUES `

// newerOrFirstReal is the condition under which an incoming row replaces
// the stored outcome: it is a real result (not only duplicates) and the
// stored row is provisional or not newer (domain.Merge).
const newerOrFirstReal = `VALUES(from_duplicate) = 0 AND (from_duplicate = 1 OR VALUES(dispatched_at) >= dispatched_at)`

// upsertSuffix applies domain.Merge. MySQL evaluates the assignments left
// to right and a later one sees the columns an earlier one changed, so
// dispatched_at and from_duplicate, which the condition reads, are assigned
// last, dispatched_at before from_duplicate; every condition therefore
// reads the stored values (the same result as MariaDB's
// SIMULTANEOUS_ASSIGNMENT mode). VALUES() rather than the row alias syntax:
// MariaDB has no row alias, MySQL 8.4 still accepts VALUES().
const upsertSuffix = ` ON DUPLICATE KEY UPDATE
 status = IF(` + newerOrFirstReal + `, VALUES(status), status),
 attempts = IF(` + newerOrFirstReal + `, VALUES(attempts), attempts),
 provider_code = IF(` + newerOrFirstReal + `, VALUES(provider_code), provider_code),
 error = IF(` + newerOrFirstReal + `, VALUES(error), error),
 body = IF(` + newerOrFirstReal + `, VALUES(body), body),
 template_version = IF(` + newerOrFirstReal + `, VALUES(template_version), template_version),
 duplicates = duplicates + VALUES(duplicates),
 dispatched_at = IF(` + newerOrFirstReal + `, VALUES(dispatched_at), dispatched_at),
 from_duplicate = IF(VALUES(from_duplicate) = 0, 0, from_duplicate)`

// UpsertSQL returns the merging statement for n rows; its arguments are
// AppendArgs of each row in order (an arrival time of nil is the server's
// CURRENT_TIMESTAMP(6), the column's default). Exported for the raw-SQL
// benchmark.
func UpsertSQL(n int) string {
	tuple := "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,COALESCE(?,CURRENT_TIMESTAMP(6))," + strconv.Itoa(notifications.WriterSchema) + ")"
	var b strings.Builder
	b.Grow(len(insertPrefix) + n*(len(tuple)+1) + len(upsertSuffix))
	b.WriteString(insertPrefix)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(tuple)
	}
	b.WriteString(upsertSuffix)
	return b.String()
}

// AppendArgs appends the statement arguments of r to args (upsertColumns
// of them), the last one its arrival time: nil, the server's time at
// insert (writeInbox replaces it). Numbers are passed as int64, strings as
// string and times as time.Time: the types database/sql hands to the
// driver as they are, without the reflection its converter needs for
// other kinds (3,800 arguments per 200-row flush).
func AppendArgs(args []any, r *domain.Row) []any {
	var runID any
	if r.RunID != "" {
		runID = r.RunID
	}
	var fromDup int64
	if r.Provisional {
		fromDup = 1
	}
	return append(args,
		r.NotificationID, u64(r.TargetID), r.OccurrenceAt.UTC(), r.RecipientID, u64(r.Sequence), r.Channel,
		r.TemplateID, string(r.Status), int64(r.Attempts), int64(r.ProviderCode), r.Error, r.Body, runID,
		r.DueAt.UTC(), r.DispatchedAt.UTC(), int64(r.Duplicates), fromDup, r.TemplateVersion, nil)
}

// u64 passes v as int64 when it fits (the fast path), else as uint64.
func u64(v uint64) any {
	if v <= math.MaxInt64 {
		return int64(v)
	}
	return v
}

// rejectedCodes are the server errors that say the data itself cannot be
// stored.
var rejectedCodes = map[uint16]bool{
	1048: true, // column cannot be null
	1153: true, // packet bigger than max_allowed_packet
	1264: true, // out of range value
	1265: true, // data truncated
	1292: true, // incorrect datetime (or other) value
	1366: true, // incorrect string / integer value
	1367: true, // illegal value for type
	1406: true, // data too long for column
	1411: true, // incorrect value for function
	3819: true, // check constraint violated (MySQL)
	4025: true, // check constraint failed (MariaDB)
}

type rejectedError struct{ err error }

func (e *rejectedError) Error() string   { return e.err.Error() }
func (e *rejectedError) Unwrap() []error { return []error{e.err, domain.ErrRejected} }

// classify wraps err with domain.ErrRejected when MySQL refused the data.
func classify(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && rejectedCodes[me.Number] {
		return &rejectedError{err: err}
	}
	if errors.Is(err, mysql.ErrPktTooLarge) {
		return &rejectedError{err: err}
	}
	return err
}

// IsRejected reports whether err says the data itself was refused.
func IsRejected(err error) bool { return errors.Is(err, domain.ErrRejected) }

// SetDriverLogger sends the MySQL driver's own messages (e.g. "closing bad
// idle connection") to log at warn level instead of unstructured stderr.
func SetDriverLogger(log *slog.Logger) {
	_ = mysql.SetLogger(driverLogger{log})
}

type driverLogger struct{ log *slog.Logger }

func (l driverLogger) Print(v ...any) { l.log.Warn("mysql driver", "msg", fmt.Sprint(v...)) }

// InsertSQL returns the plain INSERT Upsert tries first for n rows (the
// statement of UpsertSQL without its ON DUPLICATE KEY UPDATE clause).
// Exported for the raw-SQL benchmark.
func InsertSQL(n int) string {
	up := UpsertSQL(n)
	return up[:len(up)-len(upsertSuffix)]
}

package adapters

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
)

// MySQL error numbers the store branches on.
const (
	errDupEntry     = 1062
	errNoSuchTable  = 1146
	deleteChunkRows = 10000
)

// createChunk is the number of targets one INSERT … SELECT writes: the
// generator below yields 0..9999.
const createChunk = 10000

// numbers is a derived table of n = 0..9999, built from four digit tables.
// It works on MySQL 8.4 and MariaDB 10.11 alike (no sequence engine, no
// recursion limits).
var numbers = func() string {
	d := "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4" +
		" UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	return "(SELECT a.d + 10*b.d + 100*c.d + 1000*e.d AS n FROM " + d + " a CROSS JOIN " + d + " b CROSS JOIN " +
		d + " c CROSS JOIN " + d + " e)"
}()

// Store keeps benchmark runs in MySQL and reads what the pipeline wrote for
// them: the scheduler's notification_targets, target_due, outbox and outbox_relay, and
// the sink's notifications (in the same database; a missing notifications
// table counts as no rows). It is safe for concurrent use.
type Store struct {
	db *sql.DB
}

// NewStore returns a store over db (a go-sql-driver pool with parseTime
// and loc=UTC, as adapters.OpenMySQL opens it).
func NewStore(db *sql.DB) *Store { return &Store{db: db} }

func isMySQLError(err error, number uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == number
}

func jsonText(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// InsertRun stores a new run as creating and active, owned by owner. It
// returns domain.ErrBusy when another run is active (the unique key on
// active makes that atomic across replicas).
func (s *Store) InsertRun(ctx context.Context, run domain.Run, owner string) error {
	params, err := jsonText(run.Params)
	if err != nil {
		return fmt.Errorf("insert benchmark run: %w", err)
	}
	progress, err := jsonText(run.Progress)
	if err != nil {
		return fmt.Errorf("insert benchmark run: %w", err)
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO benchmark_runs (id, status, active, params, created_at, due_at, owner, heartbeat_at, progress)
		VALUES (?, ?, 1, ?, ?, ?, ?, UTC_TIMESTAMP(6), ?)`,
		run.ID, string(domain.StatusCreating), params, run.CreatedAt, run.DueAt, owner, progress)
	if isMySQLError(err, errDupEntry) {
		return domain.ErrBusy
	}
	if err != nil {
		return fmt.Errorf("insert benchmark run: %w", err)
	}
	return nil
}

const runColumns = `id, status, params, created_at, due_at, setup_sec, finished_at, targets_created,
	target_min_id, target_max_id, targets_exclusive, owner, progress, report, error`

func scanRecord(row interface{ Scan(...any) error }, withReport bool) (domain.Record, error) {
	var (
		rec              domain.Record
		status           string
		params           string
		due, finished    sql.NullTime
		minID, maxID     sql.NullInt64
		progress, report sql.NullString
		errText          sql.NullString
		exclusive        bool
		targetsCreated   int64
		runID            string
		created          time.Time
		setupSec         float64
		owner            string
	)
	if err := row.Scan(&runID, &status, &params, &created, &due, &setupSec, &finished, &targetsCreated,
		&minID, &maxID, &exclusive, &owner, &progress, &report, &errText); err != nil {
		return rec, err
	}
	r := &rec.Run
	r.ID, r.Status, r.CreatedAt, r.SetupSec, r.Error = runID, domain.Status(status), created.UTC(), setupSec, errText.String
	if due.Valid {
		r.DueAt = due.Time.UTC()
	}
	if finished.Valid {
		t := finished.Time.UTC()
		r.FinishedAt = &t
	}
	if err := json.Unmarshal([]byte(params), &r.Params); err != nil {
		return rec, fmt.Errorf("run %s: decode params: %w", runID, err)
	}
	if progress.Valid && progress.String != "" {
		if err := json.Unmarshal([]byte(progress.String), &r.Progress); err != nil {
			return rec, fmt.Errorf("run %s: decode progress: %w", runID, err)
		}
	}
	if withReport && report.Valid && report.String != "" {
		r.Report = new(domain.Report)
		if err := json.Unmarshal([]byte(report.String), r.Report); err != nil {
			return rec, fmt.Errorf("run %s: decode report: %w", runID, err)
		}
	}
	rec.Owner = owner
	rec.Targets = domain.TargetRange{RunID: runID, MinID: uint64(minID.Int64), MaxID: uint64(maxID.Int64), Exclusive: exclusive}
	return rec, nil
}

// GetRun returns run id with its report (domain.ErrNotFound when unknown).
func (s *Store) GetRun(ctx context.Context, id string) (domain.Record, error) {
	rec, err := scanRecord(s.db.QueryRowContext(ctx, `SELECT `+runColumns+` FROM benchmark_runs WHERE id = ?`, id), true)
	if errors.Is(err, sql.ErrNoRows) {
		return rec, fmt.Errorf("get benchmark run %s: %w", id, domain.ErrNotFound)
	}
	if err != nil {
		return rec, fmt.Errorf("get benchmark run %s: %w", id, err)
	}
	return rec, nil
}

// ActiveRun returns the run that is not final (domain.ErrNotFound when
// none is).
func (s *Store) ActiveRun(ctx context.Context) (domain.Record, error) {
	rec, err := scanRecord(s.db.QueryRowContext(ctx, `SELECT `+runColumns+` FROM benchmark_runs WHERE active = 1`), false)
	if errors.Is(err, sql.ErrNoRows) {
		return rec, fmt.Errorf("get the active benchmark run: %w", domain.ErrNotFound)
	}
	if err != nil {
		return rec, fmt.Errorf("get the active benchmark run: %w", err)
	}
	return rec, nil
}

// ListRuns returns up to limit runs, newest first; reports are included
// when withReports is set.
func (s *Store) ListRuns(ctx context.Context, limit int, withReports bool) ([]domain.Run, error) {
	cols := runColumns
	if !withReports {
		cols = strings.Replace(cols, "report,", "NULL AS report,", 1)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+cols+` FROM benchmark_runs ORDER BY created_at DESC, id LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("list benchmark runs: %w", err)
	}
	defer rows.Close()
	var out []domain.Run
	for rows.Next() {
		rec, err := scanRecord(rows, withReports)
		if err != nil {
			return nil, fmt.Errorf("list benchmark runs: %w", err)
		}
		out = append(out, rec.Run)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list benchmark runs: %w", err)
	}
	return out, nil
}

// Touch renews the heartbeat of active run id. It returns false when the
// run is no longer active (cancelled, or failed by another replica).
func (s *Store) Touch(ctx context.Context, id string) (bool, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE benchmark_runs SET heartbeat_at = UTC_TIMESTAMP(6) WHERE id = ? AND active = 1`, id)
	return affected(res, err, "renew benchmark run heartbeat")
}

// MarkWaiting records that run id's targets exist (rng), due at dueAt,
// created in setupSec. It returns false when the run is no longer
// creating (it was cancelled meanwhile).
func (s *Store) MarkWaiting(ctx context.Context, id string, rng domain.TargetRange, created int64, dueAt time.Time, setupSec float64) (bool, error) {
	progress, err := jsonText(domain.Progress{TargetsCreated: created})
	if err != nil {
		return false, err
	}
	res, err := s.db.ExecContext(ctx, `UPDATE benchmark_runs SET status = ?, due_at = ?, setup_sec = ?, targets_created = ?,
			target_min_id = ?, target_max_id = ?, targets_exclusive = ?, progress = ?, heartbeat_at = UTC_TIMESTAMP(6)
		WHERE id = ? AND active = 1 AND status = ?`,
		string(domain.StatusWaiting), dueAt, setupSec, created, rng.MinID, rng.MaxID, rng.Exclusive, progress,
		id, string(domain.StatusCreating))
	return affected(res, err, "mark benchmark run waiting")
}

// SaveProgress stores status and progress of active run id and renews its
// heartbeat. It returns false when the run is no longer active.
func (s *Store) SaveProgress(ctx context.Context, id string, status domain.Status, p domain.Progress) (bool, error) {
	progress, err := jsonText(p)
	if err != nil {
		return false, err
	}
	res, err := s.db.ExecContext(ctx, `UPDATE benchmark_runs SET status = ?, progress = ?, heartbeat_at = UTC_TIMESTAMP(6)
		WHERE id = ? AND active = 1`, string(status), progress, id)
	return affected(res, err, "save benchmark run progress")
}

// Finish moves active run id to its final status with its progress, report
// (nil for none) and error text. It returns false when the run was no
// longer active (a cancellation won).
func (s *Store) Finish(ctx context.Context, id string, status domain.Status, p domain.Progress, report *domain.Report, errText string, at time.Time) (bool, error) {
	progress, err := jsonText(p)
	if err != nil {
		return false, err
	}
	var rep sql.NullString
	if report != nil {
		txt, err := jsonText(report)
		if err != nil {
			return false, fmt.Errorf("encode benchmark report: %w", err)
		}
		rep = sql.NullString{String: txt, Valid: true}
	}
	res, err := s.db.ExecContext(ctx, `UPDATE benchmark_runs SET status = ?, active = NULL, finished_at = ?, progress = ?,
			report = ?, error = ?, heartbeat_at = UTC_TIMESTAMP(6)
		WHERE id = ? AND active = 1`,
		string(status), at, progress, rep, nullText(errText), id)
	return affected(res, err, "finish benchmark run")
}

// Fail moves active run id to failed with errText, keeping its progress.
// It returns false when the run was no longer active.
func (s *Store) Fail(ctx context.Context, id, errText string, at time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE benchmark_runs SET status = ?, active = NULL, finished_at = ?, error = ?
		WHERE id = ? AND active = 1`, string(domain.StatusFailed), at, nullText(errText), id)
	return affected(res, err, "fail benchmark run")
}

// Cancel moves active run id to cancelled. It returns false when the run
// was already final.
func (s *Store) Cancel(ctx context.Context, id string, at time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE benchmark_runs SET status = ?, active = NULL, finished_at = ?, error = ?
		WHERE id = ? AND active = 1`, string(domain.StatusCancelled), at, "cancelled by a client", id)
	return affected(res, err, "cancel benchmark run")
}

// ReapStale fails the active runs whose heartbeat is older than staleAfter
// (by the database's clock) and that belong to another owner than
// exceptOwner: the replica that watched them is gone. It returns their
// number.
func (s *Store) ReapStale(ctx context.Context, staleAfter time.Duration, exceptOwner string, at time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE benchmark_runs SET status = ?, active = NULL, finished_at = ?, error = ?
		WHERE active = 1 AND owner <> ? AND heartbeat_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND`,
		string(domain.StatusFailed), at,
		fmt.Sprintf("the scheduler replica watching the run stopped (no heartbeat for %s)", staleAfter),
		exceptOwner, staleAfter.Microseconds())
	if err != nil {
		return 0, fmt.Errorf("fail stale benchmark runs: %w", err)
	}
	return res.RowsAffected()
}

func nullText(s string) sql.NullString {
	if len(s) > 1024 {
		s = s[:1024]
	}
	return sql.NullString{String: s, Valid: s != ""}
}

func affected(res sql.Result, err error, what string) (bool, error) {
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return n > 0, nil
}

// TargetSpec describes the targets of a run: N one-shots on Channel with
// Template and Params, recipient Prefix + (i mod Recipients), created at
// CreatedAt.
type TargetSpec struct {
	RunID      string
	N          int
	Recipients int
	Prefix     string
	Channel    string
	Template   string
	Params     []byte
	CreatedAt  time.Time
}

// CreatedTargets says what CreateTargets wrote.
type CreatedTargets struct {
	Range       domain.TargetRange
	Count       int64
	DueAt       time.Time
	CommittedAt time.Time
}

// CreateTargets inserts spec's targets in one transaction, due at dueAt,
// with INSERT … SELECT from a generated number table (10,000 rows per
// statement: for 100,000 targets about 1.3 s on the reference machine,
// against 2.5 s for building and sending multi-row VALUES). Before the
// commit it calls decide with the time spent so far: decide returns the
// due time to use, and when it differs from dueAt (creating took longer
// than the lead) the targets are moved to it in the same transaction, so no
// scheduler can claim them before the clock starts. Nothing is visible
// before the commit; when ctx ends the transaction rolls back.
func (s *Store) CreateTargets(ctx context.Context, spec TargetSpec, dueAt time.Time, decide func(elapsed time.Duration) time.Time) (CreatedTargets, error) {
	var out CreatedTargets
	start := time.Now()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return out, fmt.Errorf("create benchmark targets: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	q := `INSERT INTO notification_targets (recipient_id, channel, webhook_url, template_id, params, schedule_kind, due_at,
			cron_expr, time_zone, next_run_at, status, run_id, created_at, updated_at)
		SELECT CONCAT(?, (? + n) MOD ?), ?, NULL, ?, ?, 'once', ?, NULL, NULL, ?, 'active', ?, ?, ?
		FROM ` + numbers + ` g WHERE n < ?`
	params := string(spec.Params)
	for off := 0; off < spec.N; off += createChunk {
		if _, err := tx.ExecContext(ctx, q, spec.Prefix, off, spec.Recipients, spec.Channel, spec.Template, params,
			dueAt, dueAt, spec.RunID, spec.CreatedAt, spec.CreatedAt, min(createChunk, spec.N-off)); err != nil {
			return out, fmt.Errorf("create benchmark targets %d..%d: %w", off, min(off+createChunk, spec.N)-1, err)
		}
	}
	var minID, maxID sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MIN(id), MAX(id), COUNT(*) FROM notification_targets WHERE run_id = ?`,
		spec.RunID).Scan(&minID, &maxID, &out.Count); err != nil {
		return out, fmt.Errorf("create benchmark targets: read their ids: %w", err)
	}
	out.Range = domain.TargetRange{RunID: spec.RunID, MinID: uint64(minID.Int64), MaxID: uint64(maxID.Int64)}
	// A locking read sees the latest committed rows and waits for other
	// transactions still inserting targets whose ids fell in our range; if
	// only ours are there, the range is exclusive for good (ids only grow).
	var inRange int64
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM notification_targets WHERE id BETWEEN ? AND ? LOCK IN SHARE MODE`,
		out.Range.MinID, out.Range.MaxID).Scan(&inRange); err != nil {
		return out, fmt.Errorf("create benchmark targets: check their id range: %w", err)
	}
	out.Range.Exclusive = inRange == out.Count
	out.DueAt = dueAt
	if d := decide(time.Since(start)); !d.Equal(dueAt) {
		if _, err := tx.ExecContext(ctx, `UPDATE notification_targets SET next_run_at = ?, due_at = ?
			WHERE id BETWEEN ? AND ? AND run_id = ?`, d, d, out.Range.MinID, out.Range.MaxID, spec.RunID); err != nil {
			return out, fmt.Errorf("create benchmark targets: move their due time: %w", err)
		}
		out.DueAt = d
	}
	// Queue them for the scheduler's claim (its due queue, target_due),
	// at their final due time.
	if _, err := tx.ExecContext(ctx, `INSERT INTO target_due (next_run_at, target_id, one_shot, run_id)
		SELECT next_run_at, id, 1, run_id FROM notification_targets WHERE id BETWEEN ? AND ? AND run_id = ? AND status = 'active'
		ON DUPLICATE KEY UPDATE target_id = target_due.target_id`,
		out.Range.MinID, out.Range.MaxID, spec.RunID); err != nil {
		return out, fmt.Errorf("create benchmark targets: queue them: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return out, fmt.Errorf("create benchmark targets: commit: %w", err)
	}
	out.CommittedAt = time.Now()
	return out, nil
}

// rangeFilter returns the WHERE clause selecting rng's outbox rows, or its
// notifications rows, and its arguments; it uses the tables' keys that
// begin with target_id (the outbox's (target_id, occurrence_at) unique key,
// the notifications primary key).
func rangeFilter(rng domain.TargetRange) (string, []any) {
	if rng.Exclusive {
		return `target_id BETWEEN ? AND ?`, []any{rng.MinID, rng.MaxID}
	}
	return `target_id BETWEEN ? AND ? AND run_id = ?`, []any{rng.MinID, rng.MaxID, rng.RunID}
}

// Counts are a sample of a run's progress in MySQL.
type Counts struct {
	OutboxRows int64
	Published  int64
	Persisted  int64
	// RelayUpdatedAt is when the relay cursor last moved.
	RelayUpdatedAt time.Time
}

// SampleCounts counts rng's outbox rows, those the relay published and the
// sink's rows of the run. skipOutbox leaves the two outbox counts 0 (the
// caller knows them final). The sink's rows are counted over the run's
// target id range on the notifications primary key. The counts run READ
// UNCOMMITTED: the sink's fresh rows then need no consistent-read version
// lookups, at the price that a row of a sink statement that will still
// roll back may be counted; the final report reads committed data only.
func (s *Store) SampleCounts(ctx context.Context, rng domain.TargetRange, skipOutbox bool) (Counts, error) {
	var c Counts
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadUncommitted, ReadOnly: true})
	if err != nil {
		return c, fmt.Errorf("sample benchmark counts: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if !skipOutbox {
		var cursor uint64
		if err := tx.QueryRowContext(ctx, `SELECT published_id, updated_at FROM outbox_relay WHERE id = 1`).Scan(&cursor, &c.RelayUpdatedAt); err != nil {
			return c, fmt.Errorf("sample benchmark counts: read the relay cursor: %w", err)
		}
		where, args := rangeFilter(rng)
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(id <= ?), 0) FROM outbox WHERE `+where,
			append([]any{cursor}, args...)...).Scan(&c.OutboxRows, &c.Published); err != nil {
			return c, fmt.Errorf("sample benchmark counts: count outbox rows: %w", err)
		}
	}
	if rng.MaxID == 0 { // no targets, no rows
		return c, nil
	}
	where, args := rangeFilter(rng)
	err = tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM notifications WHERE `+where, args...).Scan(&c.Persisted)
	if err != nil && !isMySQLError(err, errNoSuchTable) {
		return c, fmt.Errorf("sample benchmark counts: count persisted rows: %w", err)
	}
	return c, nil
}

// ReportData reads, committed, what the report is computed from: the
// number of rng's outbox rows and their latest created_at, and the sink's
// rows of the run.
func (s *Store) ReportData(ctx context.Context, rng domain.TargetRange) (outboxRows int64, lastOutboxAt time.Time, rows []domain.Row, err error) {
	where, args := rangeFilter(rng)
	var last sql.NullTime
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*), MAX(created_at) FROM outbox WHERE `+where, args...).Scan(&outboxRows, &last); err != nil {
		return 0, lastOutboxAt, nil, fmt.Errorf("read benchmark outbox rows: %w", err)
	}
	lastOutboxAt = last.Time
	rs, err := s.db.QueryContext(ctx, `SELECT target_id, occurrence_at, due_at, dispatched_at, persisted_at
		FROM notifications WHERE `+where, args...)
	if isMySQLError(err, errNoSuchTable) {
		return outboxRows, lastOutboxAt, nil, nil
	}
	if err != nil {
		return 0, lastOutboxAt, nil, fmt.Errorf("read benchmark rows: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var (
			r   domain.Row
			occ time.Time
		)
		if err := rs.Scan(&r.TargetID, &occ, &r.DueAt, &r.DispatchedAt, &r.PersistedAt); err != nil {
			return 0, lastOutboxAt, nil, fmt.Errorf("read benchmark row: %w", err)
		}
		r.OccurrenceUS = occ.UnixMicro()
		rows = append(rows, r)
	}
	if err := rs.Err(); err != nil {
		return 0, lastOutboxAt, nil, fmt.Errorf("read benchmark rows: %w", err)
	}
	return outboxRows, lastOutboxAt, rows, nil
}

// dequeueRun deletes the due-queue entries of the run's targets still
// queued (a run cancelled before its due time), found through their
// targets, 10,000 target ids per statement.
func (s *Store) dequeueRun(ctx context.Context, rng domain.TargetRange) error {
	const q = `DELETE d FROM target_due d JOIN notification_targets t ON d.next_run_at = t.next_run_at AND d.target_id = t.id
		WHERE t.run_id = ?`
	run := func(extra string, args ...any) error {
		_, err := s.db.ExecContext(ctx, q+extra, append([]any{rng.RunID}, args...)...)
		if err != nil && !isMySQLError(err, errNoSuchTable) {
			return fmt.Errorf("delete benchmark targets' queue entries: %w", err)
		}
		return nil
	}
	if rng.MaxID == 0 {
		return run("")
	}
	for lo := rng.MinID; lo <= rng.MaxID; lo += deleteChunkRows {
		if err := run(` AND t.id BETWEEN ? AND ?`, lo, min(lo+deleteChunkRows-1, rng.MaxID)); err != nil {
			return err
		}
	}
	return nil
}

// DeleteRunRows deletes the run's due-queue entries, targets, outbox rows and the sink's rows,
// 10,000 rows per statement. The outbox row at the relay cursor is kept
// (as the relay's own purge does) so the outbox's auto-increment can never
// fall back below the cursor. Rows the pipeline writes afterwards (records
// already in flight) are not deleted.
func (s *Store) DeleteRunRows(ctx context.Context, rng domain.TargetRange) error {
	type stmt struct {
		what string
		q    string
		args []any
	}
	if err := s.dequeueRun(ctx, rng); err != nil {
		return err
	}
	stmts := []stmt{{"targets", `DELETE FROM notification_targets WHERE run_id = ? LIMIT ?`, []any{rng.RunID}}}
	if rng.MaxID > 0 { // without a range there are no outbox rows either
		where, args := rangeFilter(rng)
		stmts = []stmt{
			{"targets", `DELETE FROM notification_targets WHERE id BETWEEN ? AND ? AND run_id = ? LIMIT ?`, []any{rng.MinID, rng.MaxID, rng.RunID}},
			{"outbox rows", `DELETE FROM outbox WHERE ` + where + ` AND id <> (SELECT published_id FROM outbox_relay WHERE id = 1) LIMIT ?`, args},
			{"notifications", `DELETE FROM notifications WHERE ` + where + ` LIMIT ?`, args},
		}
	}
	for _, st := range stmts {
		args := append(st.args, deleteChunkRows)
		for {
			res, err := s.db.ExecContext(ctx, st.q, args...)
			if isMySQLError(err, errNoSuchTable) {
				break
			}
			if err != nil {
				return fmt.Errorf("delete benchmark %s: %w", st.what, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return fmt.Errorf("delete benchmark %s: %w", st.what, err)
			}
			if n < deleteChunkRows {
				break
			}
		}
	}
	return nil
}

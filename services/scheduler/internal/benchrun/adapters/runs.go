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

// errDupEntry is MySQL's duplicate-key error, which InsertRun branches on.
const errDupEntry = 1062

// Store keeps benchmark runs in MySQL (the benchmark_runs table, created by
// the scheduler's migrations). What the pipeline wrote for a run is read
// through its owners: the scheduler's app.Runs and the sink's package
// notifications (Persisted). It is safe for concurrent use.
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

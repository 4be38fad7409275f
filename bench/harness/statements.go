package harness

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"
)

// StatementLog records every statement the MariaDB server runs, through
// the server's slow query log written to the table mysql.slow_log with a
// threshold of 0 s and no filter, and sums those of one database and time
// window by statement shape. Start it before the clients to observe
// connect (a session takes the log's settings, on or off included, when it
// connects), then call Summary for the window and Restore. Logging every
// statement costs the server noticeably, so the rates of a run that
// records one are not comparable with the rates of a run that does not.
type StatementLog struct {
	db       *sql.DB
	database string
	saved    struct {
		output, filter string
		long           float64
		on             bool
	}
	// truncate: mysql.slow_log held no one else's entries (the server did
	// not log to the table), so Start and Restore empty it.
	truncate bool
}

// StartStatementLog saves the server's log settings, sets the threshold
// to 0 s and the filter to nothing (by default MariaDB logs only
// statements that scan, sort or use temporary tables), the output to the
// table mysql.slow_log, and turns the log on. It empties mysql.slow_log
// first unless the server already logged to the table (an operator's
// entries stay; Summary reads only its database and window). database is
// the only database Summary reports. Call Restore after. It refuses to
// start when the log already runs with a threshold of 0 s: another
// statement log is on, or one was killed before restoring, and saving
// those settings would keep them for good.
func StartStatementLog(ctx context.Context, db *sql.DB, database string) (*StatementLog, error) {
	l := &StatementLog{db: db, database: database}
	if err := db.QueryRowContext(ctx, `SELECT @@GLOBAL.log_output, @@GLOBAL.log_slow_filter, @@GLOBAL.long_query_time, @@GLOBAL.slow_query_log`).
		Scan(&l.saved.output, &l.saved.filter, &l.saved.long, &l.saved.on); err != nil {
		return nil, fmt.Errorf("read the slow log settings: %w", err)
	}
	if l.saved.on && l.saved.long == 0 {
		return nil, fmt.Errorf("start the statement log: the server already logs every statement (another profiled run, or one killed before it restored the settings); " +
			"if none runs, restore them with SET GLOBAL slow_query_log = OFF, long_query_time = 10, log_slow_filter = DEFAULT, log_output = 'FILE'")
	}
	l.truncate = !strings.Contains(strings.ToUpper(l.saved.output), "TABLE")
	stmts := []string{`SET GLOBAL slow_query_log = OFF`}
	if l.truncate {
		stmts = append(stmts, `TRUNCATE TABLE mysql.slow_log`)
	}
	for _, q := range append(stmts,
		`SET GLOBAL log_output = 'TABLE'`,
		`SET GLOBAL long_query_time = 0`,
		`SET GLOBAL log_slow_filter = ''`,
		`SET GLOBAL slow_query_log = ON`,
	) {
		if _, err := db.ExecContext(ctx, q); err != nil {
			_ = l.Restore(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("start the statement log (%s): %w", q, err)
		}
	}
	return l, nil
}

// Restore puts the saved settings back and empties mysql.slow_log when
// Start did.
func (l *StatementLog) Restore(ctx context.Context) error {
	type stmt struct {
		sql  string
		args []any
	}
	stmts := []stmt{
		{`SET GLOBAL slow_query_log = OFF`, nil},
		{`SET GLOBAL long_query_time = ?`, []any{l.saved.long}},
		{`SET GLOBAL log_slow_filter = ?`, []any{l.saved.filter}},
	}
	if l.truncate {
		stmts = append(stmts, stmt{`TRUNCATE TABLE mysql.slow_log`, nil})
	}
	stmts = append(stmts,
		stmt{`SET GLOBAL log_output = ?`, []any{l.saved.output}},
		stmt{`SET GLOBAL slow_query_log = ?`, []any{map[bool]string{true: "ON", false: "OFF"}[l.saved.on]}})
	var errs []string
	for _, q := range stmts {
		if _, err := l.db.ExecContext(ctx, q.sql, q.args...); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", q.sql, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("restore the slow log settings: %s", strings.Join(errs, "; "))
	}
	return nil
}

// StatementStat sums the logged statements of one shape.
type StatementStat struct {
	// Shape is the statement with its literals replaced by ? and its
	// repeated lists of values shortened (NormalizeStatement).
	Shape        string  `json:"shape"`
	Calls        int64   `json:"calls"`
	Seconds      float64 `json:"seconds"` // the server's time running them
	RowsExamined int64   `json:"rowsExamined"`
	RowsSent     int64   `json:"rowsSent"`
	RowsAffected int64   `json:"rowsAffected"`
}

// Summary reads the log of the database's statements that started from
// from to to (the server's clock) and returns their shapes, the most time
// first.
func (l *StatementLog) Summary(ctx context.Context, from, to time.Time) ([]StatementStat, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT sql_text, TIME_TO_SEC(query_time), rows_examined, rows_sent, rows_affected
		FROM mysql.slow_log WHERE db = ? AND UNIX_TIMESTAMP(start_time) BETWEEN ? AND ?`,
		l.database, float64(from.UnixMicro())/1e6, float64(to.UnixMicro())/1e6)
	if err != nil {
		return nil, fmt.Errorf("read the statement log: %w", err)
	}
	defer rows.Close()
	by := map[string]*StatementStat{}
	for rows.Next() {
		var (
			text           string
			secs           float64
			exam, sent, af int64
		)
		if err := rows.Scan(&text, &secs, &exam, &sent, &af); err != nil {
			return nil, fmt.Errorf("read the statement log: %w", err)
		}
		shape := NormalizeStatement(text)
		s := by[shape]
		if s == nil {
			s = &StatementStat{Shape: shape}
			by[shape] = s
		}
		s.Calls++
		s.Seconds += secs
		s.RowsExamined += exam
		s.RowsSent += sent
		s.RowsAffected += af
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the statement log: %w", err)
	}
	out := make([]StatementStat, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Seconds != out[j].Seconds {
			return out[i].Seconds > out[j].Seconds
		}
		return out[i].Shape < out[j].Shape
	})
	return out, nil
}

var (
	sqlString = regexp.MustCompile(`'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.)*"`)
	sqlNumber = regexp.MustCompile(`-?\b\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\b|\b0x[0-9a-fA-F]+\b`)
	sqlSpace  = regexp.MustCompile(`\s+`)
	sqlList   = regexp.MustCompile(`\?(?:\s*,\s*\?)+`)
	sqlRows   = regexp.MustCompile(`\(\s*\?(?:…)?\s*\)(?:\s*,\s*\(\s*\?(?:…)?\s*\))+`)
)

// NormalizeStatement returns the shape of a statement: string and number
// literals become ?, whitespace one space, a list of two or more values
// "?…", and a list of two or more such rows "(?…)…", so that statements
// differing only in their values and row counts share one shape.
func NormalizeStatement(q string) string {
	q = sqlString.ReplaceAllString(q, "?")
	q = sqlNumber.ReplaceAllString(q, "?")
	q = strings.TrimSpace(sqlSpace.ReplaceAllString(q, " "))
	q = sqlList.ReplaceAllString(q, "?…")
	q = sqlRows.ReplaceAllString(q, "(?…)…")
	return q
}

// WriteStatementTable writes stats as a text table: calls, seconds, share
// of the logged time, rows examined, sent and affected per call, and the
// shape cut to width characters; at most limit shapes (0: all), the rest
// summed in one line.
func WriteStatementTable(w io.Writer, stats []StatementStat, width, limit int) error {
	var total float64
	for _, s := range stats {
		total += s.Seconds
	}
	if _, err := fmt.Fprintf(w, "%9s %9s %6s %9s %9s %9s  %s\n", "calls", "seconds", "share", "exam/call", "sent/call", "aff/call", "statement"); err != nil {
		return err
	}
	var rest StatementStat
	for i, s := range stats {
		if limit > 0 && i >= limit {
			rest.Calls += s.Calls
			rest.Seconds += s.Seconds
			continue
		}
		shape := s.Shape
		if r := []rune(shape); width > 0 && len(r) > width {
			shape = string(r[:width]) + "…"
		}
		if _, err := fmt.Fprintf(w, "%9d %9.3f %5.1f%% %9.1f %9.1f %9.1f  %s\n", s.Calls, s.Seconds, share(s.Seconds, total),
			perCall(s.RowsExamined, s.Calls), perCall(s.RowsSent, s.Calls), perCall(s.RowsAffected, s.Calls), shape); err != nil {
			return err
		}
	}
	if rest.Calls > 0 {
		if _, err := fmt.Fprintf(w, "%9d %9.3f %5.1f%% %9s %9s %9s  (%d other shapes)\n", rest.Calls, rest.Seconds, share(rest.Seconds, total),
			"", "", "", len(stats)-limit); err != nil {
			return err
		}
	}
	return nil
}

func share(part, total float64) float64 {
	if total == 0 {
		return 0
	}
	return 100 * part / total
}

func perCall(n, calls int64) float64 {
	if calls == 0 {
		return 0
	}
	return float64(n) / float64(calls)
}

// Package mysqlx holds MySQL plumbing shared by the services that own
// tables: versioned, idempotent schema migrations that several replicas may
// run at once.
package mysqlx

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"time"
)

// Migration is one schema version: statements applied in order, once.
// Statements should be idempotent (IF NOT EXISTS): MySQL commits DDL
// implicitly, so a migration that failed half-way is simply run again.
type Migration struct {
	Version int
	Name    string
	Stmts   []string
	// Then, when set, runs after Stmts on the same connection (for changes
	// SQL cannot make idempotent by itself); it must be idempotent too.
	Then func(ctx context.Context, conn *sql.Conn) error
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// Migrate applies the migrations not yet recorded in table (created if
// missing), in slice order. Replicas starting at once serialise on a named
// server lock (GET_LOCK, per database and table), and each applied version
// is recorded, so running it again is a no-op. A statement that fails stops
// the migration with the version named; versions already applied stay.
// Table is an identifier chosen by the caller, never user input.
func Migrate(ctx context.Context, db *sql.DB, table string, migrations []Migration) error {
	if !identifier.MatchString(table) {
		return fmt.Errorf("migrate: bad table name %q", table)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: get connection: %w", err)
	}
	defer conn.Close()
	lock := "notiflow_migrate:" + table
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(CONCAT(?, ':', DATABASE()), 60)`, lock).Scan(&got); err != nil {
		return fmt.Errorf("migrate: take migration lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return fmt.Errorf("migrate: migration lock not granted within 60s")
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SELECT RELEASE_LOCK(CONCAT(?, ':', DATABASE()))`, lock)
	}()
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
		version    INT NOT NULL PRIMARY KEY,
		name       VARCHAR(255) NOT NULL,
		applied_at DATETIME(6) NOT NULL
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`); err != nil {
		return fmt.Errorf("migrate: create %s: %w", table, err)
	}
	applied := map[int]bool{}
	rows, err := conn.QueryContext(ctx, `SELECT version FROM `+table)
	if err != nil {
		return fmt.Errorf("migrate: read applied versions: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("migrate: read applied versions: %w", err)
		}
		applied[v] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("migrate: read applied versions: %w", err)
	}
	for _, m := range migrations {
		if applied[m.Version] {
			continue
		}
		for _, stmt := range m.Stmts {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migrate: version %d (%s): %w", m.Version, m.Name, err)
			}
		}
		if m.Then != nil {
			if err := m.Then(ctx, conn); err != nil {
				return fmt.Errorf("migrate: version %d (%s): %w", m.Version, m.Name, err)
			}
		}
		if _, err := conn.ExecContext(ctx, `INSERT INTO `+table+` (version, name, applied_at) VALUES (?, ?, ?)`,
			m.Version, m.Name, time.Now().UTC()); err != nil {
			return fmt.Errorf("migrate: record version %d: %w", m.Version, err)
		}
	}
	return nil
}

// Version returns the highest version recorded in table (0 if none).
func Version(ctx context.Context, db *sql.DB, table string) (int, error) {
	if !identifier.MatchString(table) {
		return 0, fmt.Errorf("schema version: bad table name %q", table)
	}
	var v sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT MAX(version) FROM `+table).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return int(v.Int64), nil
}

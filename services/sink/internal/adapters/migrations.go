package adapters

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// migrationTable records the sink's applied schema versions. It is not
// called schema_migrations because the scheduler keeps its own table of that
// name in the same database.
const migrationTable = "sink_schema_migrations"

// migration is one versioned schema change. Statements must be idempotent
// (IF NOT EXISTS) because MySQL commits DDL implicitly: a migration that
// failed half-way is simply run again.
type migration struct {
	version int
	name    string
	stmts   []string
}

// migrations are applied in order; never edit one that was released, add a
// new version instead.
var migrations = []migration{
	{
		version: 1,
		name:    "notifications",
		stmts: []string{
			// id orders rows by insertion and keeps the clustered index
			// append-only; notification_id (random) is a secondary unique key.
			// from_duplicate = 1 while the row only reflects duplicate
			// results (see domain.Merge). persisted_at is set by the server
			// at insert and never updated: the benchmark's end-to-end latency
			// is due_at -> persisted_at.
			`CREATE TABLE IF NOT EXISTS notifications (
				id              BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
				notification_id VARCHAR(64) CHARACTER SET ascii NOT NULL,
				target_id       BIGINT UNSIGNED NOT NULL,
				occurrence_at   DATETIME(6)  NOT NULL,
				recipient_id    VARCHAR(191) NOT NULL,
				sequence        BIGINT UNSIGNED NOT NULL,
				channel         VARCHAR(16)  NOT NULL,
				template_id     VARCHAR(191) NOT NULL,
				status          VARCHAR(16)  NOT NULL,
				attempts        INT UNSIGNED NOT NULL,
				provider_code   INT          NOT NULL,
				error           VARCHAR(1024) NOT NULL,
				body            TEXT         NOT NULL,
				run_id          VARCHAR(64)  NULL,
				due_at          DATETIME(6)  NOT NULL,
				dispatched_at   DATETIME(6)  NOT NULL,
				persisted_at    DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
				duplicates      INT UNSIGNED NOT NULL DEFAULT 0,
				from_duplicate  TINYINT(1)   NOT NULL DEFAULT 0,
				PRIMARY KEY (id),
				UNIQUE KEY uq_notifications_notification (notification_id),
				KEY idx_notifications_recipient (recipient_id, dispatched_at DESC),
				KEY idx_notifications_run (run_id, persisted_at),
				KEY idx_notifications_occurrence (target_id, occurrence_at)
			) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
		},
	},
}

// Migrate brings the schema to the latest version. Replicas starting at
// once serialise on a named server lock (GET_LOCK, per database), and each
// applied version is recorded in sink_schema_migrations, so running it
// again is a no-op.
func (s *Store) Migrate(ctx context.Context) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: get connection: %w", err)
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(CONCAT('notiflow_sink_migrate:', DATABASE()), 60)`).Scan(&got); err != nil {
		return fmt.Errorf("migrate: take migration lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return fmt.Errorf("migrate: migration lock not granted within 60s")
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SELECT RELEASE_LOCK(CONCAT('notiflow_sink_migrate:', DATABASE()))`)
	}()
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+migrationTable+` (
		version    INT NOT NULL PRIMARY KEY,
		name       VARCHAR(255) NOT NULL,
		applied_at DATETIME(6) NOT NULL
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`); err != nil {
		return fmt.Errorf("migrate: create %s: %w", migrationTable, err)
	}
	applied := map[int]bool{}
	rows, err := conn.QueryContext(ctx, `SELECT version FROM `+migrationTable)
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
		if applied[m.version] {
			continue
		}
		for _, stmt := range m.stmts {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migrate: version %d (%s): %w", m.version, m.name, err)
			}
		}
		if _, err := conn.ExecContext(ctx, `INSERT INTO `+migrationTable+` (version, name, applied_at) VALUES (?, ?, ?)`,
			m.version, m.name, time.Now().UTC()); err != nil {
			return fmt.Errorf("migrate: record version %d: %w", m.version, err)
		}
	}
	return nil
}

// SchemaVersion returns the highest applied migration version (0 if none).
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v sql.NullInt64
	if err := s.db.QueryRowContext(ctx, `SELECT MAX(version) FROM `+migrationTable).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return int(v.Int64), nil
}

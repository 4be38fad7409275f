package notifications

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/notiflow/notiflow/lib/mysqlx"
)

// MigrationTable records the sink's applied schema versions. It is not
// called schema_migrations because the scheduler keeps its own table of that
// name in the same database.
const MigrationTable = "sink_schema_migrations"

// migrations are applied in order; never edit one that was released, add a
// new version instead. Statements must be idempotent (IF NOT EXISTS)
// because MySQL commits DDL implicitly: a migration that failed half-way is
// simply run again.
var migrations = []mysqlx.Migration{
	{
		Version: 1,
		Name:    "notifications",
		Stmts: []string{
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
	{
		// Fewer B-trees per inserted row, so less MariaDB CPU per row
		// (bench/README.md, BenchmarkSink). The occurrence (target_id, occurrence_at) is unique (the
		// scheduler's outbox key; the notification id is derived from it)
		// and becomes the clustered primary key, which also serves a
		// target's history and the benchmark's per-run counts by target id
		// range; the surrogate id and the run_id and occurrence indexes go.
		// One ALTER, atomic in InnoDB; Then skips it once applied.
		Version: 2,
		Name:    "notifications keyed by occurrence",
		Then: func(ctx context.Context, conn *sql.Conn) error {
			var n int
			if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.columns
				WHERE table_schema = DATABASE() AND table_name = 'notifications' AND column_name = 'id'`).Scan(&n); err != nil {
				return fmt.Errorf("look for notifications.id: %w", err)
			}
			if n == 0 {
				return nil
			}
			if _, err := conn.ExecContext(ctx, `ALTER TABLE notifications
				DROP PRIMARY KEY, DROP COLUMN id, ADD PRIMARY KEY (target_id, occurrence_at),
				DROP INDEX idx_notifications_run, DROP INDEX idx_notifications_occurrence`); err != nil {
				return fmt.Errorf("rekey notifications: %w", err)
			}
			return nil
		},
	},
}

// Migrations returns the sink's schema versions in order (a copy: callers
// such as an upgrade test may apply a prefix of them with mysqlx.Migrate).
func Migrations() []mysqlx.Migration { return slices.Clone(migrations) }

// Migrate brings db's schema to the latest version (lib/mysqlx: replicas
// starting at once serialise on a server lock; applied versions are
// recorded in sink_schema_migrations, so running it again is a no-op).
func Migrate(ctx context.Context, db *sql.DB) error {
	return mysqlx.Migrate(ctx, db, MigrationTable, migrations)
}

// SchemaVersion returns the highest applied migration version (0 if none).
func SchemaVersion(ctx context.Context, db *sql.DB) (int, error) {
	return mysqlx.Version(ctx, db, MigrationTable)
}

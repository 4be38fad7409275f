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
			// append-only; notification_id (derived from the occurrence) is a secondary unique key.
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
	{
		// The read API (reads.go, inbox.go). Every index serves one read and
		// nothing else; each costs the sink's inserts write throughput
		// (README.md, Benchmarks):
		//   - the primary key (target_id, occurrence_at) serves a target's
		//     notifications, newest first (no new index);
		//   - idx_notifications_recipient (recipient_id, occurrence_at)
		//     replaces (recipient_id, dispatched_at DESC), which no read
		//     used: a recipient's notifications, newest first;
		//   - idx_notifications_inbox (recipient_id, channel, persisted_at):
		//     a recipient's inbox in arrival order, so that "read up to"
		//     never covers a later arrival.
		// template_version is the version of the template the dispatcher
		// rendered (lib/templates: a managed template's version number, a
		// built-in or file template's content hash; '' when unknown);
		// read_at is when an inbox row was marked read (NULL: unread).
		// inbox_unread keeps each recipient's unread inbox count,
		// maintained by triggers on every insert, update and delete of a
		// row, so that counting is one primary-key read and no writer can
		// forget it.
		Version: 3,
		Name:    "read API: template version, inbox read state, read indexes",
		Then:    readAPISchema,
	},
	{
		// Inbox rows apart: the inbox's arrival index and read state move
		// from notifications to inbox_entries, which holds one row per
		// inbox notification (its key, recipient, arrival and read time),
		// and the unread counter's triggers move with them. Rows of the
		// other channels then pay for neither the inbox index nor a
		// trigger on insert (BenchmarkUpsertSchemaCost in the sink's
		// adapters: a sim row's write costs MariaDB about 0.7x).
		// notifications keeps every row of every channel. See inboxApart.
		Version: 4,
		Name:    "inbox rows apart",
		Then:    inboxApart,
	},
}

// readAPIStmts are migration 3's statements after its ALTER; each is
// idempotent (IF NOT EXISTS). A trigger body
// is one compound statement, valid in MySQL 8.4 and MariaDB 10.11.
var readAPIStmts = []string{
	`CREATE TABLE IF NOT EXISTS inbox_unread (
		recipient_id VARCHAR(191) NOT NULL,
		unread       BIGINT NOT NULL,
		PRIMARY KEY (recipient_id)
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	`CREATE TRIGGER IF NOT EXISTS notifications_inbox_insert AFTER INSERT ON notifications FOR EACH ROW
		IF NEW.channel = 'inbox' AND NEW.read_at IS NULL THEN
			INSERT INTO inbox_unread (recipient_id, unread) VALUES (NEW.recipient_id, 1)
				ON DUPLICATE KEY UPDATE unread = unread + 1;
		END IF`,
	`CREATE TRIGGER IF NOT EXISTS notifications_inbox_update AFTER UPDATE ON notifications FOR EACH ROW
		IF NEW.channel = 'inbox' AND (OLD.read_at IS NULL) <> (NEW.read_at IS NULL) THEN
			UPDATE inbox_unread SET unread = unread + IF(NEW.read_at IS NULL, 1, -1)
				WHERE recipient_id = NEW.recipient_id;
		END IF`,
	`CREATE TRIGGER IF NOT EXISTS notifications_inbox_delete AFTER DELETE ON notifications FOR EACH ROW
		IF OLD.channel = 'inbox' AND OLD.read_at IS NULL THEN
			UPDATE inbox_unread SET unread = unread - 1 WHERE recipient_id = OLD.recipient_id;
		END IF`,
}

// readAPISchema is migration 3: the ALTER (one statement, atomic in
// InnoDB; skipped once read_at exists), then readAPIStmts, then on the
// first run the unread counts of the rows already stored.
func readAPISchema(ctx context.Context, conn *sql.Conn) error {
	var n int
	if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.columns
		WHERE table_schema = DATABASE() AND table_name = 'notifications' AND column_name = 'read_at'`).Scan(&n); err != nil {
		return fmt.Errorf("look for notifications.read_at: %w", err)
	}
	if n == 0 {
		if _, err := conn.ExecContext(ctx, `ALTER TABLE notifications
			ADD COLUMN template_version VARCHAR(64) CHARACTER SET ascii NOT NULL DEFAULT '',
			ADD COLUMN read_at DATETIME(6) NULL,
			DROP INDEX idx_notifications_recipient,
			ADD INDEX idx_notifications_recipient (recipient_id, occurrence_at),
			ADD INDEX idx_notifications_inbox (recipient_id, channel, persisted_at)`); err != nil {
			return fmt.Errorf("add the read columns and indexes to notifications: %w", err)
		}
	}
	for _, stmt := range readAPIStmts {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("create the inbox unread counter: %w", err)
		}
	}
	if n == 0 { // first run: count the inbox rows stored before the triggers
		if _, err := conn.ExecContext(ctx, `INSERT INTO inbox_unread (recipient_id, unread)
			SELECT recipient_id, COUNT(*) FROM notifications WHERE channel = 'inbox' AND read_at IS NULL GROUP BY recipient_id
			ON DUPLICATE KEY UPDATE unread = VALUES(unread)`); err != nil {
			return fmt.Errorf("count the stored unread inbox rows: %w", err)
		}
	}
	return nil
}

// WriterSchema is the value the sink writes into notifications.writer_schema:
// the schema version of the code that writes the row.
const WriterSchema = 4

// inboxApartStmts are migration 4's statements after its copy; each is
// idempotent. inbox_entries' triggers keep inbox_unread exact; deleting a
// notification deletes its inbox entry (and so counts it out).
var inboxApartStmts = []string{
	`CREATE TRIGGER IF NOT EXISTS inbox_entries_insert AFTER INSERT ON inbox_entries FOR EACH ROW
		IF NEW.read_at IS NULL THEN
			INSERT INTO inbox_unread (recipient_id, unread) VALUES (NEW.recipient_id, 1)
				ON DUPLICATE KEY UPDATE unread = unread + 1;
		END IF`,
	`CREATE TRIGGER IF NOT EXISTS inbox_entries_update AFTER UPDATE ON inbox_entries FOR EACH ROW
		IF (OLD.read_at IS NULL) <> (NEW.read_at IS NULL) THEN
			UPDATE inbox_unread SET unread = unread + IF(NEW.read_at IS NULL, 1, -1)
				WHERE recipient_id = NEW.recipient_id;
		END IF`,
	`CREATE TRIGGER IF NOT EXISTS inbox_entries_delete AFTER DELETE ON inbox_entries FOR EACH ROW
		IF OLD.read_at IS NULL THEN
			UPDATE inbox_unread SET unread = unread - 1 WHERE recipient_id = OLD.recipient_id;
		END IF`,
	`CREATE TRIGGER IF NOT EXISTS notifications_inbox_entry_delete AFTER DELETE ON notifications FOR EACH ROW
		IF OLD.channel = 'inbox' THEN
			DELETE FROM inbox_entries WHERE target_id = OLD.target_id AND occurrence_at = OLD.occurrence_at;
		END IF`,
	// The counts as the entries say (they were the same rows' counts
	// before; a run interrupted half-way may have left them behind).
	`INSERT INTO inbox_unread (recipient_id, unread)
		SELECT recipient_id, COUNT(*) FROM inbox_entries WHERE read_at IS NULL GROUP BY recipient_id
		ON DUPLICATE KEY UPDATE unread = VALUES(unread)`,
	`UPDATE inbox_unread u SET unread = 0 WHERE NOT EXISTS (
		SELECT 1 FROM inbox_entries i WHERE i.recipient_id = u.recipient_id AND i.read_at IS NULL)`,
}

// inboxApart is migration 4, in an order that a run interrupted at any
// point (a killed pod) can simply repeat, and that resumes a long copy:
//
//  1. notifications gains writer_schema, NOT NULL without a default: a
//     sink built for an older schema names no such column, so under the
//     strict sql_mode every sink sets its inserts fail (error 1364, which
//     it treats as transient and retries without committing its
//     offsets). During a rolling upgrade its records are therefore written
//     by a current sink once it takes their partitions over, never stored
//     without their inbox entry. Existing rows get 0.
//  2. inbox_entries is created and the old triggers on notifications are
//     dropped; while notifications.read_at still exists, every inbox row's
//     entry is copied with its read state (copyInboxEntries), then the
//     inbox index and read_at leave notifications (two ALTERs, each of
//     which both servers can do without rebuilding the table).
//  3. inbox_entries' triggers are created and the unread counts recounted
//     from the entries.
func inboxApart(ctx context.Context, conn *sql.Conn) error {
	fenced, err := hasColumn(ctx, conn, "writer_schema")
	if err != nil {
		return err
	}
	if !fenced {
		if _, err := conn.ExecContext(ctx, `ALTER TABLE notifications ADD COLUMN writer_schema TINYINT UNSIGNED NOT NULL`); err != nil {
			return fmt.Errorf("add notifications.writer_schema: %w", err)
		}
	}
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS inbox_entries (
		target_id     BIGINT UNSIGNED NOT NULL,
		occurrence_at DATETIME(6)  NOT NULL,
		recipient_id  VARCHAR(191) NOT NULL,
		persisted_at  DATETIME(6)  NOT NULL,
		read_at       DATETIME(6)  NULL,
		PRIMARY KEY (target_id, occurrence_at),
		KEY idx_inbox_entries_recipient (recipient_id, persisted_at)
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`); err != nil {
		return fmt.Errorf("create inbox_entries: %w", err)
	}
	for _, trigger := range []string{"notifications_inbox_insert", "notifications_inbox_update", "notifications_inbox_delete"} {
		if _, err := conn.ExecContext(ctx, `DROP TRIGGER IF EXISTS `+trigger); err != nil {
			return fmt.Errorf("drop trigger %s: %w", trigger, err)
		}
	}
	copyPending, err := hasColumn(ctx, conn, "read_at")
	if err != nil {
		return err
	}
	if copyPending {
		if err := copyInboxEntries(ctx, conn); err != nil {
			return err
		}
		var n int
		if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.statistics
			WHERE table_schema = DATABASE() AND table_name = 'notifications' AND index_name = 'idx_notifications_inbox'`).Scan(&n); err != nil {
			return fmt.Errorf("look for idx_notifications_inbox: %w", err)
		}
		if n > 0 {
			if _, err := conn.ExecContext(ctx, `ALTER TABLE notifications DROP INDEX idx_notifications_inbox`); err != nil {
				return fmt.Errorf("drop the inbox index from notifications: %w", err)
			}
		}
		if _, err := conn.ExecContext(ctx, `ALTER TABLE notifications DROP COLUMN read_at`); err != nil {
			return fmt.Errorf("drop read_at from notifications: %w", err)
		}
	}
	for _, stmt := range inboxApartStmts {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("inbox entries' counting: %w", err)
		}
	}
	return nil
}

// copyChunk is how many notifications rows one statement of the inbox
// entries' copy reads.
var copyChunk = 20_000

// copyStarts, when set (tests), is told where copyInboxEntries starts:
// after target lo, or from the first target when first.
var copyStarts func(lo uint64, first bool)

// copyInboxEntries copies every inbox row's entry from notifications, in
// primary-key order, copyChunk rows a statement (each atomic): a copy
// interrupted half-way resumes after the last target it copied.
func copyInboxEntries(ctx context.Context, conn *sql.Conn) error {
	var from sql.Null[uint64]
	if err := conn.QueryRowContext(ctx, `SELECT MAX(target_id) FROM inbox_entries`).Scan(&from); err != nil {
		return fmt.Errorf("find where the inbox entries' copy stands: %w", err)
	}
	lo := from.V // targets up to lo are copied (0: none, or only target 0's)
	first := !from.Valid
	if copyStarts != nil {
		copyStarts(lo, first)
	}
	for {
		var hi sql.Null[uint64]
		err := conn.QueryRowContext(ctx, `SELECT MAX(target_id) FROM (SELECT target_id FROM notifications
			WHERE target_id > ? OR ? ORDER BY target_id, occurrence_at LIMIT ?) chunk`, lo, first, copyChunk).Scan(&hi)
		if err != nil {
			return fmt.Errorf("find the next chunk of the inbox entries' copy: %w", err)
		}
		if !hi.Valid {
			return nil
		}
		if _, err := conn.ExecContext(ctx, `INSERT IGNORE INTO inbox_entries (target_id, occurrence_at, recipient_id, persisted_at, read_at)
			SELECT target_id, occurrence_at, recipient_id, persisted_at, read_at FROM notifications
			WHERE (target_id > ? OR ?) AND target_id <= ? AND channel = 'inbox'`, lo, first, hi.V); err != nil {
			return fmt.Errorf("copy the inbox entries of targets up to %d: %w", hi.V, err)
		}
		lo, first = hi.V, false
	}
}

// hasColumn reports whether notifications has column.
func hasColumn(ctx context.Context, conn *sql.Conn, column string) (bool, error) {
	var n int
	err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.columns
		WHERE table_schema = DATABASE() AND table_name = 'notifications' AND column_name = ?`, column).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("look for notifications.%s: %w", column, err)
	}
	return n > 0, nil
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

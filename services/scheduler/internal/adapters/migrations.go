package adapters

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/notiflow/notiflow/lib/mysqlx"
)

// migrationTable records the scheduler's applied schema versions.
const migrationTable = "schema_migrations"

// migrations are applied in order; never edit one that was released, add a
// new version instead.
var migrations = []mysqlx.Migration{
	{
		Version: 1,
		Name:    "notification_targets, outbox, relay cursor and claim lock",
		Stmts: []string{
			`CREATE TABLE IF NOT EXISTS notification_targets (
				id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
				recipient_id  VARCHAR(191) NOT NULL,
				channel       VARCHAR(16)  NOT NULL,
				webhook_url   VARCHAR(2048) NULL,
				template_id   VARCHAR(191) NOT NULL,
				params        MEDIUMTEXT   NOT NULL,
				schedule_kind VARCHAR(8)   NOT NULL,
				due_at        DATETIME(6)  NULL,
				cron_expr     VARCHAR(255) NULL,
				time_zone     VARCHAR(64)  NULL,
				next_run_at   DATETIME(6)  NOT NULL,
				status        VARCHAR(8)   NOT NULL,
				run_id        VARCHAR(64)  NULL,
				created_at    DATETIME(6)  NOT NULL,
				updated_at    DATETIME(6)  NOT NULL,
				PRIMARY KEY (id),
				KEY idx_targets_due (status, next_run_at, id),
				KEY idx_targets_run (run_id)
			) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
			// The outbox: one row per due occurrence, in claim order. The
			// row id is the per-recipient sequence. (Version 3 drops the
			// columns copied from the target.)
			`CREATE TABLE IF NOT EXISTS outbox (
				id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
				event_id      CHAR(36) CHARACTER SET ascii NOT NULL,
				target_id     BIGINT UNSIGNED NOT NULL,
				occurrence_at DATETIME(6)  NOT NULL,
				due_at        DATETIME(6)  NOT NULL,
				recipient_id  VARCHAR(191) NOT NULL,
				channel       VARCHAR(16)  NOT NULL,
				webhook_url   VARCHAR(2048) NULL,
				template_id   VARCHAR(191) NOT NULL,
				params        MEDIUMTEXT   NOT NULL,
				run_id        VARCHAR(64)  NULL,
				created_at    DATETIME(6)  NOT NULL,
				PRIMARY KEY (id),
				UNIQUE KEY uq_outbox_occurrence (target_id, occurrence_at)
			) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
			// The relay's cursor: every outbox row with id <= published_id
			// was acknowledged by Kafka. One row.
			`CREATE TABLE IF NOT EXISTS outbox_relay (
				id           TINYINT UNSIGNED NOT NULL,
				published_id BIGINT UNSIGNED NOT NULL,
				updated_at   DATETIME(6) NOT NULL,
				PRIMARY KEY (id)
			) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
			`INSERT IGNORE INTO outbox_relay (id, published_id, updated_at) VALUES (1, 0, UTC_TIMESTAMP(6))`,
			// Every claim transaction locks this row first, so outbox rows
			// commit in id order whoever writes them (see ClaimDue).
			`CREATE TABLE IF NOT EXISTS outbox_claim_lock (
				id TINYINT UNSIGNED NOT NULL,
				PRIMARY KEY (id)
			) ENGINE=InnoDB`,
			`INSERT IGNORE INTO outbox_claim_lock (id) VALUES (1)`,
		},
	},
	{
		Version: 2,
		Name:    "benchmark_runs",
		Stmts: []string{
			// One row per benchmark run (internal/benchrun). active is 1
			// while the run is not final and NULL after: the unique key lets
			// one run at a time exist across replicas. heartbeat_at is
			// renewed by the replica watching the run; a stale one means that
			// replica died. target_min_id..target_max_id is the id range of
			// the run's targets; targets_exclusive says no other target has
			// an id in it (then the range alone selects the run's outbox rows).
			`CREATE TABLE IF NOT EXISTS benchmark_runs (
				id                CHAR(36) CHARACTER SET ascii NOT NULL,
				status            VARCHAR(16)  NOT NULL,
				active            TINYINT UNSIGNED NULL,
				params            TEXT         NOT NULL,
				created_at        DATETIME(6)  NOT NULL,
				due_at            DATETIME(6)  NULL,
				setup_sec         DOUBLE       NOT NULL DEFAULT 0,
				finished_at       DATETIME(6)  NULL,
				targets_created   BIGINT UNSIGNED NOT NULL DEFAULT 0,
				target_min_id     BIGINT UNSIGNED NULL,
				target_max_id     BIGINT UNSIGNED NULL,
				targets_exclusive TINYINT(1)   NOT NULL DEFAULT 0,
				owner             VARCHAR(191) NOT NULL,
				heartbeat_at      DATETIME(6)  NOT NULL,
				progress          TEXT         NULL,
				report            MEDIUMTEXT   NULL,
				error             VARCHAR(1024) NULL,
				PRIMARY KEY (id),
				UNIQUE KEY uq_benchmark_runs_active (active),
				KEY idx_benchmark_runs_created (created_at)
			) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
		},
	},
	{
		// A lean outbox: a row only names the occurrence (target_id,
		// occurrence_at), its run and claim time. The relay reads the rest
		// from the target, which never changes after creation apart from
		// status and next_run_at; the notification id is derived
		// (domain.NotificationID). Writing the copied columns cost about
		// half of each claim's INSERT.
		Version: 3,
		Name:    "lean outbox",
		Then:    dropColumns("outbox", "event_id", "due_at", "recipient_id", "channel", "webhook_url", "template_id", "params"),
	},
	{
		// The due queue: one row per active target, keyed by when it is
		// next due. A claim reads and deletes a key range of it instead of
		// moving each target's entry in a (status, next_run_at) index of
		// the targets; that index is dropped. Every writer of a target's
		// status or next_run_at keeps the queue in step in the same
		// transaction, and a claim drops rows that no longer match their
		// target (see BeginClaim).
		Version: 4,
		Name:    "due queue",
		Stmts: []string{
			`CREATE TABLE IF NOT EXISTS target_due (
				next_run_at DATETIME(6)     NOT NULL,
				target_id   BIGINT UNSIGNED NOT NULL,
				PRIMARY KEY (next_run_at, target_id)
			) ENGINE=InnoDB`,
			`INSERT IGNORE INTO target_due (next_run_at, target_id)
				SELECT next_run_at, id FROM notification_targets WHERE status = 'active'`,
		},
		Then: dropIndex("notification_targets", "idx_targets_due"),
	},
	{
		// One-shots claimed from the queue alone. A queue entry says
		// whether its target is a one-shot and carries the target's run:
		// all a claim needs to fire it, so a one-shot's claim neither reads
		// nor updates its target (half of a claim's database time). Its
		// status is settled to "done" later, off the claim's path, from the
		// outbox rows after outbox_relay.settled_id; until then the store
		// reports an active one-shot without a queue entry as done.
		// An entry with one_shot = 0 (a cron target's, or one written
		// without the flag) takes the path that reads and updates the
		// target.
		Version: 5,
		Name:    "one-shots claimed from the due queue",
		Then: func(ctx context.Context, conn *sql.Conn) error {
			if err := addColumns(ctx, conn, "target_due",
				"one_shot TINYINT UNSIGNED NOT NULL DEFAULT 0", "run_id VARCHAR(64) NULL"); err != nil {
				return err
			}
			if err := addColumns(ctx, conn, "outbox_relay", "settled_id BIGINT UNSIGNED NOT NULL DEFAULT 0"); err != nil {
				return err
			}
			for _, q := range []string{
				`UPDATE target_due d JOIN notification_targets t ON t.id = d.target_id
					SET d.one_shot = (t.schedule_kind = 'once'), d.run_id = t.run_id`,
				// Rows already in the outbox need no settling (their
				// claims updated their targets): settling starts after them.
				`UPDATE outbox_relay SET settled_id = (SELECT COALESCE(MAX(id), 0) FROM outbox) WHERE id = 1 AND settled_id = 0`,
			} {
				if _, err := conn.ExecContext(ctx, q); err != nil {
					return fmt.Errorf("fill the due queue's new columns: %w", err)
				}
			}
			return nil
		},
	},
	{
		// Outbox rows the relay gave up on (see app.Relay): one row per
		// outbox id with what identifies the notification and why it was
		// parked. The relay moves its cursor past a row only once it is
		// published or recorded here.
		Version: 6,
		Name:    "parked outbox rows",
		Stmts: []string{
			`CREATE TABLE IF NOT EXISTS outbox_parked (
				outbox_id       BIGINT UNSIGNED NOT NULL,
				notification_id CHAR(36) CHARACTER SET ascii NOT NULL,
				target_id       BIGINT UNSIGNED NOT NULL,
				recipient_id    VARCHAR(191) NOT NULL,
				occurrence_at   DATETIME(6)  NOT NULL,
				reason          VARCHAR(1024) NOT NULL,
				parked_at       DATETIME(6)  NOT NULL,
				PRIMARY KEY (outbox_id)
			) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
		},
	},
	{
		// Webhook signing secrets, one row per target that has its own
		// (see lib/webhooksig and app.WebhookSecrets). previous_secret
		// stays valid until previous_until after a rotation; version grows
		// with each rotation and guards the copy in Redis. updated_at is
		// the database's clock, so that the incremental sync to Redis
		// compares like with like across replicas.
		Version: 7,
		Name:    "webhook signing secrets",
		Stmts: []string{
			`CREATE TABLE IF NOT EXISTS webhook_secrets (
				target_id       BIGINT UNSIGNED NOT NULL,
				secret          VARCHAR(128) CHARACTER SET ascii NOT NULL,
				previous_secret VARCHAR(128) CHARACTER SET ascii NULL,
				previous_until  DATETIME(6) NULL,
				version         BIGINT UNSIGNED NOT NULL,
				updated_at      DATETIME(6) NOT NULL,
				PRIMARY KEY (target_id),
				KEY idx_webhook_secrets_updated (updated_at)
			) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
		},
	},
	{
		// Managed templates (POST /v1/templates, app.Templates; format of
		// lib/templates). A deleted template stays as a tombstone
		// (deleted_at set) so that versions never restart for a name and
		// the copy in Redis, guarded by version, is never overwritten by an
		// older one. params is the JSON array of declared parameter names.
		// The targets' template index serves the "still used" check of a
		// delete.
		Version: 8,
		Name:    "managed templates",
		Stmts: []string{
			`CREATE TABLE IF NOT EXISTS templates (
				name       VARCHAR(191) NOT NULL,
				channel    VARCHAR(16)  NOT NULL,
				subject    TEXT         NOT NULL,
				body       MEDIUMTEXT   NOT NULL,
				params     TEXT         NOT NULL,
				version    BIGINT UNSIGNED NOT NULL,
				created_at DATETIME(6)  NOT NULL,
				updated_at DATETIME(6)  NOT NULL,
				deleted_at DATETIME(6)  NULL,
				PRIMARY KEY (name)
			) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
		},
		Then: func(ctx context.Context, conn *sql.Conn) error {
			return addIndex(ctx, conn, "notification_targets", "idx_targets_template", "template_id, status")
		},
	},
	{
		// Fences (see app.Fences): a target's version grows with every
		// change made through the API (PATCH, pause, resume, delete), in
		// the transaction of the change; fenced_at is the database's clock
		// at that change (the incremental copy to Redis reads from it) and
		// fence_outbox_id the highest outbox id then: every outbox row of
		// the target claimed before the change is at or below it, every
		// later one above (see UpdateTarget). The relay gives a row at or
		// below it a version below the target's, so the dispatcher, which
		// never sends a record below the target's fence, fences it.
		Version: 9,
		Name:    "target versions and fences",
		Then: func(ctx context.Context, conn *sql.Conn) error {
			if err := addColumns(ctx, conn, "notification_targets",
				"version BIGINT UNSIGNED NOT NULL DEFAULT 1", "fenced_at DATETIME(6) NULL",
				"fence_outbox_id BIGINT UNSIGNED NOT NULL DEFAULT 0"); err != nil {
				return err
			}
			return addIndex(ctx, conn, "notification_targets", "idx_targets_fenced", "fenced_at")
		},
	},
	{
		// The change feed of webhook_secrets (SecretChanges): an
		// incremental sync to Redis reads (updated_at, target_id, version)
		// from this index alone, in its order, and reads whole records
		// only for the versions it has not seen in Redis yet. It replaces
		// the index on updated_at alone.
		Version: 10,
		Name:    "webhook secrets change feed",
		Then: func(ctx context.Context, conn *sql.Conn) error {
			if err := addIndex(ctx, conn, "webhook_secrets", "idx_webhook_secrets_changes", "updated_at, target_id, version"); err != nil {
				return err
			}
			return dropIndex("webhook_secrets", "idx_webhook_secrets_updated")(ctx, conn)
		},
	},
	{
		// Notification ids in occurrence order (domain.NotificationID)
		// for the outbox rows after outbox_relay.ordered_ids_after; the
		// rows up to it keep the hashed ids they were, or may have been,
		// published with (domain.HashedNotificationID), so a row an older
		// scheduler published and a current one publishes again keeps
		// its id. The outbox lock's table is renamed first: a scheduler
		// built for version 6 to 10 can then neither claim nor relay (it
		// finds no outbox_claim_lock and retries), so no row after the
		// cutoff is ever published with a hashed id. (One built for
		// version 5 or below relays without that lock: the README says to
		// stop it first.) See orderedIDs.
		Version: 11,
		Name:    "ordered notification ids",
		Then:    orderedIDs,
	},
}

// orderedIDs is migration 11. Each step is idempotent, so a migration
// stopped half-way runs again: the lock table renamed (if not yet), the
// cutoff column added (if not yet) and set to the highest outbox id once
// no older scheduler can write one (if not set yet).
func orderedIDs(ctx context.Context, conn *sql.Conn) error {
	var n int
	if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox_claim_lock'`).Scan(&n); err != nil {
		return fmt.Errorf("look up outbox_claim_lock: %w", err)
	}
	if n > 0 {
		// Waits for the claims and relay reads that hold its row.
		if _, err := conn.ExecContext(ctx, `RENAME TABLE outbox_claim_lock TO outbox_lock`); err != nil {
			return fmt.Errorf("rename outbox_claim_lock: %w", err)
		}
	}
	if err := addColumns(ctx, conn, "outbox_relay", "ordered_ids_after BIGINT UNSIGNED NULL"); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, `UPDATE outbox_relay
		SET ordered_ids_after = (SELECT COALESCE(MAX(id), 0) FROM outbox)
		WHERE id = 1 AND ordered_ids_after IS NULL`); err != nil {
		return fmt.Errorf("set outbox_relay.ordered_ids_after: %w", err)
	}
	return nil
}

// hasColumn reports whether table of the current database has column.
func hasColumn(ctx context.Context, conn *sql.Conn, table, column string) (bool, error) {
	var n int
	if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?`, table, column).Scan(&n); err != nil {
		return false, fmt.Errorf("look up column %s.%s: %w", table, column, err)
	}
	return n > 0, nil
}

// addColumns adds those of columns (each "name definition") that table
// does not have yet, in one ALTER (MySQL has no ADD COLUMN IF NOT EXISTS).
func addColumns(ctx context.Context, conn *sql.Conn, table string, columns ...string) error {
	var adds []string
	for _, c := range columns {
		name, _, _ := strings.Cut(c, " ")
		has, err := hasColumn(ctx, conn, table, name)
		if err != nil {
			return err
		}
		if !has {
			adds = append(adds, "ADD COLUMN "+c)
		}
	}
	if len(adds) == 0 {
		return nil
	}
	if _, err := conn.ExecContext(ctx, "ALTER TABLE `"+table+"` "+strings.Join(adds, ", ")); err != nil {
		return fmt.Errorf("add columns to %s: %w", table, err)
	}
	return nil
}

// addIndex adds index (on columns) to table unless it is there (MySQL has
// no ADD INDEX IF NOT EXISTS).
func addIndex(ctx context.Context, conn *sql.Conn, table, index, columns string) error {
	var n int
	if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND INDEX_NAME = ?`, table, index).Scan(&n); err != nil {
		return fmt.Errorf("look up index %s.%s: %w", table, index, err)
	}
	if n > 0 {
		return nil
	}
	if _, err := conn.ExecContext(ctx, "ALTER TABLE `"+table+"` ADD INDEX `"+index+"` ("+columns+")"); err != nil {
		return fmt.Errorf("add index %s.%s: %w", table, index, err)
	}
	return nil
}

// dropIndex drops the index of table if it is still there (MySQL has no
// DROP INDEX IF EXISTS).
func dropIndex(table, index string) func(context.Context, *sql.Conn) error {
	return func(ctx context.Context, conn *sql.Conn) error {
		var n int
		if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.STATISTICS
			WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND INDEX_NAME = ?`, table, index).Scan(&n); err != nil {
			return fmt.Errorf("look up index %s.%s: %w", table, index, err)
		}
		if n == 0 {
			return nil
		}
		if _, err := conn.ExecContext(ctx, "ALTER TABLE `"+table+"` DROP INDEX `"+index+"`"); err != nil {
			return fmt.Errorf("drop index %s.%s: %w", table, index, err)
		}
		return nil
	}
}

// dropColumns drops those of columns that table still has, in one ALTER
// (MySQL has no DROP COLUMN IF EXISTS).
func dropColumns(table string, columns ...string) func(context.Context, *sql.Conn) error {
	return func(ctx context.Context, conn *sql.Conn) error {
		var drops []string
		for _, c := range columns {
			has, err := hasColumn(ctx, conn, table, c)
			if err != nil {
				return err
			}
			if has {
				drops = append(drops, "DROP COLUMN `"+c+"`")
			}
		}
		if len(drops) == 0 {
			return nil
		}
		if _, err := conn.ExecContext(ctx, "ALTER TABLE `"+table+"` "+strings.Join(drops, ", ")); err != nil {
			return fmt.Errorf("drop columns of %s: %w", table, err)
		}
		return nil
	}
}

// Migrate brings the schema to the latest version (lib/mysqlx: replicas
// starting at once serialise on a server lock; applied versions are
// recorded in schema_migrations, so running it again is a no-op).
func (s *MySQLStore) Migrate(ctx context.Context) error {
	return mysqlx.Migrate(ctx, s.db, migrationTable, migrations)
}

// SchemaVersion returns the highest applied migration version (0 if none).
func (s *MySQLStore) SchemaVersion(ctx context.Context) (int, error) {
	return mysqlx.Version(ctx, s.db, migrationTable)
}

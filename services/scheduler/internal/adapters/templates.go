package adapters

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/lib/templates"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

var _ app.TemplateStore = (*MySQLStore)(nil)

const templateColumns = `name, channel, subject, body, params, version, created_at, updated_at, deleted_at`

type rowScanner interface{ Scan(dest ...any) error }

func scanTemplate(row rowScanner) (app.TemplateRecord, error) {
	var (
		r       app.TemplateRecord
		params  string
		deleted sql.NullTime
	)
	if err := row.Scan(&r.Name, &r.Channel, &r.Subject, &r.Body, &params, &r.Version, &r.CreatedAt, &r.UpdatedAt, &deleted); err != nil {
		return r, err
	}
	if err := json.Unmarshal([]byte(params), &r.Params); err != nil {
		return r, fmt.Errorf("template %q: params column: %w", r.Name, err)
	}
	r.Deleted = deleted.Valid
	return r, nil
}

// lockTemplate reads template name FOR UPDATE in tx; ok is false when
// there is no row (live or tombstone).
func lockTemplate(ctx context.Context, tx *sql.Tx, name string) (app.TemplateRecord, bool, error) {
	r, err := scanTemplate(tx.QueryRowContext(ctx, `SELECT `+templateColumns+` FROM templates WHERE name = ? FOR UPDATE`, name))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return r, false, nil
	case err != nil:
		return r, false, fmt.Errorf("lock template %q: %w", name, err)
	}
	return r, true, nil
}

// changeTemplate runs fn on template name's row, locked, in a transaction
// and returns what fn returns once committed.
func (s *MySQLStore) changeTemplate(ctx context.Context, op, name string, fn func(*sql.Tx, app.TemplateRecord, bool) (app.TemplateRecord, error)) (app.TemplateRecord, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return app.TemplateRecord{}, fmt.Errorf("%s template: begin: %w", op, err)
	}
	defer func() { _ = tx.Rollback() }()
	cur, found, err := lockTemplate(ctx, tx, name)
	if err != nil {
		return app.TemplateRecord{}, err
	}
	rec, err := fn(tx, cur, found)
	if err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1062 {
			return app.TemplateRecord{}, fmt.Errorf("%w: template %q exists", app.ErrTemplateExists, name)
		}
		return app.TemplateRecord{}, err
	}
	if err := tx.Commit(); err != nil {
		return app.TemplateRecord{}, fmt.Errorf("%s template %q: commit: %w", op, name, err)
	}
	return rec, nil
}

func writeTemplate(ctx context.Context, tx *sql.Tx, insert bool, r app.TemplateRecord) error {
	params, err := json.Marshal(r.Params)
	if err != nil {
		return fmt.Errorf("encode params of template %q: %w", r.Name, err)
	}
	var deleted any
	if r.Deleted {
		deleted = r.UpdatedAt
	}
	if insert {
		_, err = tx.ExecContext(ctx, `INSERT INTO templates (`+templateColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.Name, r.Channel, r.Subject, r.Body, string(params), r.Version, r.CreatedAt, r.UpdatedAt, deleted)
	} else {
		_, err = tx.ExecContext(ctx, `UPDATE templates SET channel = ?, subject = ?, body = ?, params = ?, version = ?,
			created_at = ?, updated_at = ?, deleted_at = ? WHERE name = ?`,
			r.Channel, r.Subject, r.Body, string(params), r.Version, r.CreatedAt, r.UpdatedAt, deleted, r.Name)
	}
	if err != nil {
		return fmt.Errorf("write template %q: %w", r.Name, err)
	}
	return nil
}

// CreateTemplate implements app.TemplateStore.
func (s *MySQLStore) CreateTemplate(ctx context.Context, t templates.Template, now time.Time) (app.TemplateRecord, error) {
	return s.changeTemplate(ctx, "create", t.Name, func(tx *sql.Tx, cur app.TemplateRecord, found bool) (app.TemplateRecord, error) {
		if found && !cur.Deleted {
			return cur, fmt.Errorf("%w: template %q exists", app.ErrTemplateExists, t.Name)
		}
		t.Deleted, t.Version = false, cur.Version+1
		rec := app.TemplateRecord{Template: t, CreatedAt: now, UpdatedAt: now}
		return rec, writeTemplate(ctx, tx, !found, rec)
	})
}

// UpdateTemplate implements app.TemplateStore: in the transaction that
// locks the template's row, live targets are checked against the new
// version (checkLiveTargets).
func (s *MySQLStore) UpdateTemplate(ctx context.Context, t templates.Template, now time.Time) (app.TemplateRecord, error) {
	return s.changeTemplate(ctx, "update", t.Name, func(tx *sql.Tx, cur app.TemplateRecord, found bool) (app.TemplateRecord, error) {
		if !found || cur.Deleted {
			return cur, fmt.Errorf("%w: %q", app.ErrTemplateNotFound, t.Name)
		}
		t.Deleted, t.Version = false, cur.Version+1
		if err := checkLiveTargets(ctx, tx, t); err != nil {
			return cur, err
		}
		rec := app.TemplateRecord{Template: t, CreatedAt: cur.CreatedAt, UpdatedAt: now}
		return rec, writeTemplate(ctx, tx, false, rec)
	})
}

// DeleteTemplate implements app.TemplateStore: live targets are those
// active or paused (a done target never fires again).
func (s *MySQLStore) DeleteTemplate(ctx context.Context, name string, now time.Time) (app.TemplateRecord, error) {
	return s.changeTemplate(ctx, "delete", name, func(tx *sql.Tx, cur app.TemplateRecord, found bool) (app.TemplateRecord, error) {
		if !found || cur.Deleted {
			return cur, fmt.Errorf("%w: %q", app.ErrTemplateNotFound, name)
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM notification_targets WHERE template_id = ? AND status IN (?, ?)`,
			name, string(domain.StatusActive), string(domain.StatusPaused)).Scan(&n); err != nil {
			return cur, fmt.Errorf("count the targets of template %q: %w", name, err)
		}
		if n > 0 {
			return cur, fmt.Errorf("%w: template %q is used by %d active or paused targets; delete them or change their template first", app.ErrTemplateInUse, name, n)
		}
		cur.Deleted, cur.Version, cur.UpdatedAt = true, cur.Version+1, now
		return cur, writeTemplate(ctx, tx, false, cur)
	})
}

// GetTemplate implements app.TemplateStore.
func (s *MySQLStore) GetTemplate(ctx context.Context, name string) (app.TemplateRecord, error) {
	r, err := scanTemplate(s.db.QueryRowContext(ctx, `SELECT `+templateColumns+` FROM templates WHERE name = ? AND deleted_at IS NULL`, name))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return r, fmt.Errorf("%w: %q", app.ErrTemplateNotFound, name)
	case err != nil:
		return r, fmt.Errorf("read template %q: %w", name, err)
	}
	return r, nil
}

// ListTemplates implements app.TemplateStore.
func (s *MySQLStore) ListTemplates(ctx context.Context, withDeleted bool) ([]app.TemplateRecord, error) {
	q := `SELECT ` + templateColumns + ` FROM templates`
	if !withDeleted {
		q += ` WHERE deleted_at IS NULL`
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	defer rows.Close()
	var out []app.TemplateRecord
	for rows.Next() {
		r, err := scanTemplate(rows)
		if err != nil {
			return nil, fmt.Errorf("list templates: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return out, nil
}

// TemplateCopy is the copy of the managed templates in Redis that the
// dispatchers read (lib/templates owns its format). It is safe for
// concurrent use.
type TemplateCopy struct {
	rdb    *redis.Client
	prefix string
}

var _ app.TemplateCopy = (*TemplateCopy)(nil)

// NewTemplateCopy returns the copy under prefix (the dispatcher's
// NOTIFLOW_REDIS_PREFIX).
func NewTemplateCopy(rdb *redis.Client, prefix string) *TemplateCopy {
	return &TemplateCopy{rdb: rdb, prefix: prefix}
}

// Put writes ts in one pipeline (templates.Store: never over a higher
// version).
func (c *TemplateCopy) Put(ctx context.Context, ts []templates.Template) error {
	if len(ts) == 0 {
		return nil
	}
	cmds, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, t := range ts {
			if err := templates.Store(ctx, p, c.prefix, t); err != nil {
				return err
			}
		}
		return nil
	})
	err = firstPipelineErr(cmds, err)
	if err != nil {
		return fmt.Errorf("write %d templates to redis: %w", len(ts), err)
	}
	return nil
}

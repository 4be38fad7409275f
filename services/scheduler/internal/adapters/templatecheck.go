package adapters

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/notiflow/notiflow/lib/templates"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// conflictSample is how many target ids a conflict message names.
const conflictSample = 5

// checkLiveTargets returns an error wrapping app.ErrTemplateBreaksTargets
// when t, about to become version t.Version of its template, would fail
// at send time for live (active or paused) targets that name it: t binds
// a channel other than theirs, or declares params their params object
// lacks (the check target creation runs, app.Templates.CheckUse, run on
// the stored targets). It runs in tx, after the template's row is locked,
// over the template index idx_targets_template (template_id, status).
func checkLiveTargets(ctx context.Context, tx *sql.Tx, t templates.Template) error {
	live := `FROM notification_targets WHERE template_id = ? AND status IN (?, ?)`
	args := []any{t.Name, string(domain.StatusActive), string(domain.StatusPaused)}
	if t.Channel != "" {
		if err := conflicting(ctx, tx, live+` AND channel <> ?`, append(args, t.Channel),
			fmt.Sprintf("template %q v%d is bound to channel %s, but", t.Name, t.Version, t.Channel),
			"use another channel", "delete them or create a new template"); err != nil {
			return err
		}
	}
	if len(t.Params) > 0 {
		// The names are identifiers (templates.Check), valid as path
		// members; they are bound, never spliced.
		q := live + ` AND NOT JSON_CONTAINS_PATH(params, 'all'` + strings.Repeat(", ?", len(t.Params)) + `)`
		pargs := append([]any(nil), args...)
		for _, p := range t.Params {
			pargs = append(pargs, "$."+p)
		}
		if err := conflicting(ctx, tx, q, pargs,
			fmt.Sprintf("template %q v%d declares params (%s) that", t.Name, t.Version, strings.Join(t.Params, ", ")),
			"lack", "give them the params first (PATCH) or create a new template"); err != nil {
			return err
		}
	}
	return nil
}

// conflicting counts the targets of from (a FROM ... WHERE clause with
// args) and, when there are some, returns app.ErrTemplateBreaksTargets
// saying "<what> <n> active or paused targets <verb> (first: ids); <fix>".
func conflicting(ctx context.Context, tx *sql.Tx, from string, args []any, what, verb, fix string) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) `+from, args...).Scan(&n); err != nil {
		return fmt.Errorf("check the live targets of the template: %w", err)
	}
	if n == 0 {
		return nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT id `+from+` ORDER BY id LIMIT `+fmt.Sprint(conflictSample), args...)
	if err != nil {
		return fmt.Errorf("list the live targets of the template: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("list the live targets of the template: %w", err)
		}
		ids = append(ids, fmt.Sprint(id))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list the live targets of the template: %w", err)
	}
	more := ""
	if n > len(ids) {
		more = ", ..."
	}
	return fmt.Errorf("%w: %s %d active or paused targets %s (first: %s%s); %s",
		app.ErrTemplateBreaksTargets, what, n, verb, strings.Join(ids, ", "), more, fix)
}

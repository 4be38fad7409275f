package app

import (
	"context"
	"fmt"
	"time"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// TargetPatch is a change to a target as a client describes it: a nil
// field is left as it is. Giving DueAt makes the target a one-shot,
// giving Cron a cron target (with TimeZone, "" meaning UTC); TimeZone
// alone moves a cron target to another zone. Recipient and channel are
// not part of a patch: they identify where a target's notifications go
// and in which order, so changing them is a new target.
type TargetPatch struct {
	WebhookURL *string
	TemplateID *string
	Params     []byte // nil: unchanged
	DueAt      *time.Time
	Cron       *string
	TimeZone   *string
}

// Patch changes target id in place (its id stays) and returns it. The
// merged target is validated as a new one is (Build; and CheckTarget
// when the patch changes the template, params or webhook URL), so a patch
// cannot store what a create would refuse. An active target's next run is computed from now under the
// new schedule and its due-queue entry moves with it; a paused one stays
// paused. Every patch that changes the target raises its version, so
// every occurrence claimed under the old version that has not been sent
// yet is fenced (recorded CANCELLED, never sent; see Fences): Patch
// returns once that fence holds, like Delete and Pause. A patch whose
// merged target has the definition (webhook URL, template, params,
// schedule) the target already holds, such as a repeat, changes nothing:
// the stored target is returned as it is (same version, next run and
// updated_at) and nothing is fenced; its fence is still settled, so a
// repeat of a change that answered ErrFenceNotSettled waits again. A target that is done (a one-shot
// that fired, a cron without further slots) cannot be patched
// (domain.ErrConflict). Errors are *domain.ValidationError for bad input.
func (s *Targets) Patch(ctx context.Context, id int64, p TargetPatch) (domain.Target, error) {
	now := s.clock().UTC().Truncate(time.Microsecond)
	t, err := s.store.UpdateTarget(ctx, id, func(cur domain.Target) (domain.Target, error) {
		if cur.Status != domain.StatusActive && cur.Status != domain.StatusPaused {
			return cur, fmt.Errorf("%w: cannot change a target that is %s", domain.ErrConflict, cur.Status)
		}
		next, err := s.Build(mergePatch(cur, p), now)
		if err != nil {
			return cur, err
		}
		// What the outside world decides (template, params, webhook host)
		// is checked again only when the patch changes it.
		if p.TemplateID != nil || p.Params != nil || p.WebhookURL != nil {
			if err := s.CheckTarget(ctx, next); err != nil {
				return cur, err
			}
		}
		if next.SameDefinition(cur) {
			// A repeat (or a patch that gives what the target already
			// holds): nothing changes, not even the next run of a cron
			// target that is due but not claimed yet, so no version is
			// raised and nothing claimed is fenced.
			return cur, nil
		}
		next.ID, next.RunID, next.CreatedAt, next.Version = cur.ID, cur.RunID, cur.CreatedAt, cur.Version
		if cur.Status == domain.StatusPaused {
			next.Status = domain.StatusPaused
		}
		return next, nil
	})
	if err != nil {
		return domain.Target{}, err
	}
	return t, s.fence(ctx, t)
}

// mergePatch is the input that describes cur with p applied.
func mergePatch(cur domain.Target, p TargetPatch) TargetInput {
	in := TargetInput{
		RecipientID: cur.RecipientID, Channel: string(cur.Channel), WebhookURL: cur.WebhookURL,
		TemplateID: cur.TemplateID, Params: cur.Params,
	}
	if cur.Schedule.Kind() == domain.KindOnce {
		due := cur.Schedule.DueAt()
		in.DueAt = &due
	} else {
		in.Cron, in.TimeZone = cur.Schedule.Expr(), cur.Schedule.Zone()
	}
	if p.WebhookURL != nil {
		in.WebhookURL = *p.WebhookURL
	}
	if p.TemplateID != nil {
		in.TemplateID = *p.TemplateID
	}
	if p.Params != nil {
		in.Params = p.Params
	}
	switch {
	case p.DueAt != nil && p.Cron != nil:
		in.DueAt, in.Cron = p.DueAt, *p.Cron // Build names the conflict
	case p.DueAt != nil:
		in.DueAt, in.Cron, in.TimeZone = p.DueAt, "", ""
	case p.Cron != nil:
		in.DueAt, in.Cron, in.TimeZone = nil, *p.Cron, ""
	}
	if p.TimeZone != nil {
		in.TimeZone = *p.TimeZone
	}
	return in
}

package app

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	schedulerapp "github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
	schedulerdomain "github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// createTargets creates run's targets through the scheduler's application
// layer, renewing the run's heartbeat meanwhile (creating a million
// targets takes a while). When the run stops being active meanwhile (a
// client cancelled it), creating stops, the targets created so far are
// deleted and it returns ErrCancelledWhileCreating.
func (s *Service) createTargets(ctx context.Context, run domain.Run, secret string) (schedulerapp.CreatedRun, error) {
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		t := time.NewTicker(defaultTouchEvery)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
				ok, err := s.store.Touch(cctx, run.ID)
				switch {
				case err != nil && cctx.Err() == nil:
					s.log.Warn("benchmark: renew heartbeat", "run", run.ID, "err", err)
				case err == nil && !ok:
					cancel(ErrCancelledWhileCreating)
					return
				}
			}
		}
	}()
	spec := schedulerapp.RunSpec{RunID: run.ID, N: run.Params.Notifications, Input: targetInputs(run), WebhookSecret: secret}
	// decide runs once the targets are stored, held: if the planned due
	// time is too close, they fall due after their release instead (which
	// is given as long as creating took, a bound it stays under), so the
	// clock never includes the setup.
	decide := func(elapsed time.Duration) time.Time {
		now := s.now()
		if now.Add(elapsed + commitMargin).Before(run.DueAt) {
			return run.DueAt
		}
		return now.Add(elapsed + commitMargin)
	}
	created, err := s.targets.Create(cctx, spec, decide)
	if err != nil && errors.Is(context.Cause(cctx), ErrCancelledWhileCreating) {
		return created, ErrCancelledWhileCreating
	}
	return created, err
}

// targetInputs returns the input of each of run's targets: target i goes
// to recipient RecipientPrefix + i%Recipients; all share the rest.
func targetInputs(run domain.Run) func(i int) schedulerapp.TargetInput {
	p := run.Params
	prefix, params, due := domain.RecipientPrefix(run.ID), p.TargetParams(), run.DueAt
	return func(i int) schedulerapp.TargetInput {
		return schedulerapp.TargetInput{RecipientID: prefix + strconv.Itoa(i%p.Recipients), Channel: p.Channel,
			WebhookURL: p.WebhookURL, TemplateID: domain.Template, Params: params, DueAt: &due}
	}
}

// checkTarget runs the API's target checks on the run's first target (the
// others differ only by recipient); a *schedulerdomain.ValidationError
// becomes a *domain.ValidationError on the same field.
func (s *Service) checkTarget(ctx context.Context, run domain.Run) error {
	err := s.targets.Check(ctx, targetInputs(run)(0))
	var ve *schedulerdomain.ValidationError
	if errors.As(err, &ve) {
		return &domain.ValidationError{Field: ve.Field, Msg: ve.Msg}
	}
	if err != nil {
		return fmt.Errorf("check the run's targets: %w", err)
	}
	return nil
}

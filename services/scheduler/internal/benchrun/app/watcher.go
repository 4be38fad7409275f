package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	schedulerapp "github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
)

// watcher follows one run. Every Options.Sample it samples
//
//   - the lag of the dispatcher and sink consumer groups (Kafka offsets),
//   - dispatched: distinct occurrences the simulated provider sent (HLEN;
//     0 for the other channels),
//
// and, paced (see countBudget), it counts
//
//   - outbox rows and published rows (over the run's target id range; no
//     longer once every eligible row is published),
//   - persisted: the sink's rows of the run;
//
// it stores the progress (which renews the run's heartbeat) and finishes
// the run when every eligible occurrence is persisted (done) or nothing
// moved for Options.Stall (failed, with a report showing what is lost).
//
// eventPublishSec is sampled: the first outbox count that sees every row
// published takes the relay cursor's updated_at when it falls between the
// previous outbox count and this one (the moment the cursor passed the
// last row), else its own time; so it is exact to the relay's clock, or
// late by at most one count interval. The claim stage ends at the last
// outbox row's created_at when that falls after the count preceding the
// first one that saw every row, else at that count (the scheduler stamps a
// scan's rows with the scan's start).
//
// Counting is the watcher's only costly observation: a count reads every
// row of the run counted so far. Pacing bounds it to 1/countBudget of the
// run's wall time per kind of count while a count takes under
// maxCountGap/countBudget (100 ms); a longer count runs every maxCountGap,
// its share growing with the run (see countBudget). Once the outbox is
// final and both consumer groups have no lag (the pipeline holds nothing
// more), the persisted rows are counted every sample, so a finished run is
// seen at once.
type watcher struct {
	s   *Service
	rec domain.Record

	prog                domain.Progress
	status              domain.Status
	lag                 []domain.LagSample
	lastChange          time.Time
	claimedAt           time.Time // first outbox count that saw every row
	claimedWindow       time.Time // the outbox count before it
	publishedAt         time.Time
	lastPublishIncrease time.Time
	outboxFinal         bool
	prevOutboxCount     time.Time // when the outbox was last counted (watcher clock); the due time before

	lastConfirm time.Time
	lastErr     string
	// nextOutboxCount and nextPersistedCount pace the counts (wall clock).
	nextOutboxCount    time.Time
	nextPersistedCount time.Time
}

// countBudget paces the watcher's counts: after a count that took d, the
// next of its kind waits countBudget×d (at most maxCountGap, and at most a
// quarter of Options.Stall), so counting takes at most 1/countBudget of
// the wall time per kind of count.
const (
	countBudget = 50
	maxCountGap = 5 * time.Second
)

// paced returns when the next count may run after one that began at start.
func (w *watcher) paced(start time.Time) time.Time {
	gap := min(countBudget*time.Since(start), maxCountGap, w.s.opts.Stall/4)
	return time.Now().Add(gap)
}

// settled reports whether the pipeline holds nothing more of the run: the
// outbox is final and the last lag sample shows no lag in any group.
func (w *watcher) settled() bool {
	if !w.outboxFinal || len(w.lag) == 0 {
		return false
	}
	for _, l := range w.lag[len(w.lag)-1].Lag {
		if l != 0 {
			return false
		}
	}
	return true
}

func newWatcher(s *Service, rec domain.Record) *watcher {
	return &watcher{s: s, rec: rec, prog: rec.Run.Progress, status: rec.Run.Status, prevOutboxCount: rec.Run.DueAt}
}

func (w *watcher) eligible() int64 { return w.rec.Run.Progress.TargetsCreated }

// run samples until the run is final or ctx ends: on cancellation (cause
// errCancelled) it just returns; on shutdown it fails the run.
func (w *watcher) run(ctx context.Context) {
	id := w.rec.Run.ID
	t := time.NewTicker(w.s.opts.Sample)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), errCancelled) {
				return
			}
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopFailTimeout)
			defer cancel()
			if ok, err := w.s.store.Finish(fctx, id, domain.StatusFailed, w.prog, nil, errStoppedRunText, w.s.now()); err != nil {
				w.s.log.Error("benchmark: fail run on shutdown", "run", id, "err", err)
			} else if ok {
				w.s.log.Warn("benchmark run failed: the scheduler is stopping", "run", id)
			}
			return
		case <-t.C:
		}
		if done := w.step(ctx); done {
			return
		}
	}
}

// step takes one sample and returns true once the run is final (or no
// longer this watcher's).
func (w *watcher) step(ctx context.Context) bool {
	id, due := w.rec.Run.ID, w.rec.Run.DueAt
	now := w.s.now()
	if w.status == domain.StatusWaiting && !now.Before(due) {
		w.status = domain.StatusRunning
		w.lastChange = due
	}
	if w.status == domain.StatusRunning {
		w.sample(ctx, now)
	}
	ok, err := w.s.store.SaveProgress(ctx, id, w.status, w.prog)
	switch {
	case err != nil:
		w.warn("save progress", err)
	case !ok:
		w.s.log.Info("benchmark: run no longer active, watcher stops", "run", id)
		return true
	}
	if w.status != domain.StatusRunning {
		return false
	}
	if w.prog.Persisted >= w.eligible() && now.Sub(w.lastConfirm) >= confirmEvery {
		w.lastConfirm = now
		// The relay moves its cursor just after Kafka's ack, so the sink
		// can be done before a sample saw the last row published: look
		// again.
		if !w.outboxFinal {
			w.sampleOutbox(ctx, w.s.now())
		}
		rep, err := w.report(ctx)
		if err != nil {
			w.warn("compute report", err)
			return false
		}
		if rep.Lost == 0 {
			return w.finish(ctx, domain.StatusDone, rep, "")
		}
	}
	if stalled := now.Sub(w.lastChange); stalled >= w.s.opts.Stall {
		rep, err := w.report(ctx)
		if err != nil {
			w.warn("compute report", err)
			rep = nil
		}
		return w.finish(ctx, domain.StatusFailed, rep, fmt.Sprintf("timeout: no progress for %s (%d of %d notifications persisted)",
			w.s.opts.Stall, w.prog.Persisted, w.eligible()))
	}
	return false
}

// sample updates the progress and the lag series; errors are logged and
// the previous values kept.
func (w *watcher) sample(ctx context.Context, now time.Time) {
	id := w.rec.Run.ID
	before := w.prog
	if lag, err := w.s.lag.Sample(ctx); err != nil {
		w.warn("sample consumer lag", err)
	} else {
		w.lag = append(w.lag, domain.LagSample{At: now, Lag: lag})
	}
	if w.rec.Run.Params.Channel == domain.ChannelSim {
		if n, err := w.s.sends.Distinct(ctx, id); err != nil {
			w.warn("count simulated sends", err)
		} else {
			w.prog.Dispatched = n
		}
	}
	if !w.outboxFinal && !time.Now().Before(w.nextOutboxCount) {
		start := time.Now()
		// The count's own time: the relay cursor's updated_at is compared
		// with it, and the lag sample above took time.
		w.sampleOutbox(ctx, w.s.now())
		w.nextOutboxCount = w.paced(start)
	}
	if w.settled() || !time.Now().Before(w.nextPersistedCount) {
		start := time.Now()
		if n, err := w.s.persisted.Count(ctx, w.rec.Targets); err != nil {
			w.warn("count persisted rows", err)
		} else {
			w.prog.Persisted = n
		}
		w.nextPersistedCount = w.paced(start)
	}
	if w.prog != before {
		w.lastChange = now
	}
}

// sampleOutbox samples the outbox counts alone.
func (w *watcher) sampleOutbox(ctx context.Context, now time.Time) {
	c, err := w.s.targets.SampleOutbox(ctx, w.rec.Targets)
	if err != nil {
		w.warn("sample outbox counts", err)
		return
	}
	w.applyOutbox(c, now)
	w.prevOutboxCount = now
}

// applyOutbox takes the outbox counts of a count at now and notes when
// every eligible row is published (then the outbox counts are final).
func (w *watcher) applyOutbox(c schedulerapp.RunOutbox, now time.Time) {
	if c.Published > w.prog.Published {
		w.lastPublishIncrease = now
	}
	w.prog.OutboxRows, w.prog.Published = c.Rows, c.Published
	if w.claimedAt.IsZero() && w.prog.OutboxRows >= w.eligible() {
		w.claimedAt, w.claimedWindow = now, w.prevOutboxCount
	}
	if w.prog.OutboxRows >= w.eligible() && w.prog.Published >= w.prog.OutboxRows {
		w.outboxFinal = true
		w.publishedAt = now
		if r := c.RelayUpdatedAt; r.After(w.prevOutboxCount) && !r.After(now) {
			w.publishedAt = r
		}
	}
}

// report reads the pipeline's data and computes the report.
func (w *watcher) report(ctx context.Context) (*domain.Report, error) {
	id := w.rec.Run.ID
	outbox, lastOutbox, err := w.s.targets.OutboxReport(ctx, w.rec.Targets)
	if err != nil {
		return nil, err
	}
	rows, err := w.s.persisted.Rows(ctx, w.rec.Targets)
	if err != nil {
		return nil, err
	}
	var twice []domain.Occurrence
	if w.rec.Run.Params.Channel == domain.ChannelSim {
		if twice, err = w.s.sends.SentMoreThanOnce(ctx, id); err != nil {
			return nil, err
		}
	}
	published := w.publishedAt
	if published.IsZero() {
		published = w.lastPublishIncrease
	}
	// The outbox rows' created_at is the claim's notion of now, which may
	// be the start of a whole scan rather than the commit of the last
	// batch: when it is older than the count before the one that saw
	// every row, that count's time bounds the claims' end, and so does
	// the end of publishing (a row is claimed before it is published):
	// the earlier of the two. (Counts are paced, so the count can come
	// long after publishing ended.)
	if !w.claimedAt.IsZero() && !lastOutbox.After(w.claimedWindow) {
		lastOutbox = w.claimedAt
		if !published.IsZero() && published.Before(lastOutbox) {
			lastOutbox = published
		}
	}
	rep := domain.ComputeReport(domain.ReportInput{
		DueAt: w.rec.Run.DueAt, Eligible: w.eligible(), OutboxCreated: outbox, LastOutboxAt: lastOutbox,
		PublishedAt: published, Rows: rows, SentMoreThanOnce: twice, Lag: w.lag, Groups: w.s.lag.Groups(),
	})
	return &rep, nil
}

func (w *watcher) finish(ctx context.Context, status domain.Status, rep *domain.Report, errText string) bool {
	id := w.rec.Run.ID
	ok, err := w.s.store.Finish(ctx, id, status, w.prog, rep, errText, w.s.now())
	if err != nil {
		w.warn("store the result", err)
		return false // try again at the next sample
	}
	if ok {
		args := []any{"run", id, "status", status}
		if rep != nil {
			args = append(args, "msgs_per_second", rep.MsgsPerSecond, "total_sec", rep.TotalSec, "lost", rep.Lost, "duplicates", rep.Duplicates)
		}
		if errText != "" {
			args = append(args, "err", errText)
		}
		w.s.log.Info("benchmark run finished", args...)
	}
	return true
}

// warn logs a sampling error once until a different one occurs.
func (w *watcher) warn(what string, err error) {
	msg := what + ": " + err.Error()
	if msg == w.lastErr {
		return
	}
	w.lastErr = msg
	w.s.log.Warn("benchmark: "+what, "run", w.rec.Run.ID, "err", err)
}

package app

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	schedulerapp "github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
)

// Store keeps runs (*adapters.Store).
type Store interface {
	InsertRun(ctx context.Context, run domain.Run, owner string) error
	GetRun(ctx context.Context, id string) (domain.Record, error)
	ActiveRun(ctx context.Context) (domain.Record, error)
	ListRuns(ctx context.Context, limit int, withReports bool) ([]domain.Run, error)
	Touch(ctx context.Context, id string) (bool, error)
	MarkWaiting(ctx context.Context, id string, rng domain.TargetRange, created int64, dueAt time.Time, setupSec float64) (bool, error)
	SaveProgress(ctx context.Context, id string, status domain.Status, p domain.Progress) (bool, error)
	Finish(ctx context.Context, id string, status domain.Status, p domain.Progress, report *domain.Report, errText string, at time.Time) (bool, error)
	Fail(ctx context.Context, id, errText string, at time.Time) (bool, error)
	Cancel(ctx context.Context, id string, at time.Time) (bool, error)
	ReapStale(ctx context.Context, staleAfter time.Duration, exceptOwner string, at time.Time) (int64, error)
}

// Targets creates, observes and deletes a run's targets and outbox rows
// through the scheduler's application layer (*schedulerapp.Runs).
type Targets interface {
	Check(ctx context.Context, in schedulerapp.TargetInput) error
	Create(ctx context.Context, spec schedulerapp.RunSpec, decide func(elapsed time.Duration) time.Time) (schedulerapp.CreatedRun, error)
	SampleOutbox(ctx context.Context, rng domain.TargetRange) (schedulerapp.RunOutbox, error)
	OutboxReport(ctx context.Context, rng domain.TargetRange) (int64, time.Time, error)
	Delete(ctx context.Context, rng domain.TargetRange) error
}

// Persisted reads and deletes the sink's rows of a run
// (*adapters.Persisted).
type Persisted interface {
	Count(ctx context.Context, rng domain.TargetRange) (int64, error)
	Rows(ctx context.Context, rng domain.TargetRange) ([]domain.Row, error)
	Delete(ctx context.Context, rng domain.TargetRange) error
}

// Sends is the simulated provider's record of sends (*adapters.SimSends).
type Sends interface {
	Distinct(ctx context.Context, runID string) (int64, error)
	SentMoreThanOnce(ctx context.Context, runID string) ([]domain.Occurrence, error)
	Delete(ctx context.Context, runID string) error
}

// LagSampler samples consumer group lag (*adapters.Lag).
type LagSampler interface {
	Sample(ctx context.Context) (map[string]int64, error)
	Groups() []string
}

var (
	_ Store      = (*adapters.Store)(nil)
	_ Targets    = (*schedulerapp.Runs)(nil)
	_ Persisted  = (*adapters.Persisted)(nil)
	_ Sends      = (*adapters.SimSends)(nil)
	_ LagSampler = (*adapters.Lag)(nil)
)

// Deps are what the service works with.
type Deps struct {
	Runs      Store
	Targets   Targets
	Persisted Persisted
	Sends     Sends
	Lag       LagSampler
}

// Errors callers branch on (besides domain.ErrNotFound and
// *domain.ValidationError).
var (
	// ErrStopped: the service is shutting down and takes no new run.
	ErrStopped = errors.New("the scheduler is shutting down")
	// ErrCancelledWhileCreating: a client cancelled the run while its
	// targets were being created; they were removed.
	ErrCancelledWhileCreating = errors.New("the run was cancelled while its targets were being created")
)

// BusyError says which run holds the one-run-at-a-time slot.
type BusyError struct {
	ID     string
	Status domain.Status
}

func (e *BusyError) Error() string {
	if e.ID == "" {
		return "another benchmark run is in progress"
	}
	return fmt.Sprintf("benchmark run %s is %s: wait for it to finish or cancel it (DELETE /admin/benchmarks/%s)", e.ID, e.Status, e.ID)
}

func (e *BusyError) Unwrap() error { return domain.ErrBusy }

// Defaults of Options.
const (
	DefaultStaleAfter = 15 * time.Second
	DefaultReapEvery  = 5 * time.Second
	defaultTouchEvery = time.Second
	commitMargin      = 500 * time.Millisecond
	stopFailTimeout   = 5 * time.Second
	confirmEvery      = time.Second
	errStoppedRunText = "the scheduler stopped before the run finished"
	maxListLimit      = 500
	defaultListLimit  = 50
)

// Options configure the service.
type Options struct {
	// Lead is how long after the request the targets fall due.
	Lead time.Duration
	// Stall fails a running run after this long without progress.
	Stall time.Duration
	// Sample is the watcher's sampling interval.
	Sample time.Duration
	// MaxNotifications bounds a run.
	MaxNotifications int
	// StaleAfter: an active run whose heartbeat is this old belongs to a
	// replica that died, and is failed (checked at start and every
	// ReapEvery).
	StaleAfter, ReapEvery time.Duration
	// Owner names this replica (default: host name, pid and a random
	// suffix).
	Owner string
	// Clock is time.Now unless set (tests).
	Clock func() time.Time
}

// Service starts, watches, lists and cancels benchmark runs. Its methods
// are safe for concurrent use; Run must be running for Start to hand runs
// over.
type Service struct {
	store     Store
	targets   Targets
	persisted Persisted
	sends     Sends
	lag       LagSampler
	opts      Options
	log       *slog.Logger

	starts  chan domain.Record
	stopped chan struct{}
	once    sync.Once

	mu      sync.Mutex
	watches map[string]*watch
	wg      sync.WaitGroup
}

type watch struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// errCancelled is the cause a watcher's context ends with on DELETE.
var errCancelled = errors.New("cancelled")

// NewService returns the service.
func NewService(deps Deps, opts Options, log *slog.Logger) *Service {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.StaleAfter <= 0 {
		opts.StaleAfter = DefaultStaleAfter
	}
	if opts.ReapEvery <= 0 {
		opts.ReapEvery = DefaultReapEvery
	}
	if opts.Owner == "" {
		host, _ := os.Hostname()
		opts.Owner = fmt.Sprintf("%s/%d/%s", host, os.Getpid(), rand.Text()[:8])
	}
	return &Service{
		store: deps.Runs, targets: deps.Targets, persisted: deps.Persisted, sends: deps.Sends, lag: deps.Lag,
		opts: opts, log: log,
		starts:  make(chan domain.Record),
		stopped: make(chan struct{}),
		watches: map[string]*watch{},
	}
}

func (s *Service) now() time.Time { return s.opts.Clock().UTC().Truncate(time.Microsecond) }

// Run fails the runs a dead replica left active, then watches every run
// Start hands over, until ctx ends. Then it stops taking runs, marks the
// runs it watches failed ("the scheduler stopped before the run finished":
// a run is not resumed by another replica, its numbers would be wrong) and
// returns nil once every watcher has returned (bounded by a few seconds of
// database writes).
func (s *Service) Run(ctx context.Context) error {
	defer func() {
		s.once.Do(func() { close(s.stopped) })
		s.mu.Lock()
		for _, w := range s.watches {
			w.cancel(context.Cause(ctx))
		}
		s.mu.Unlock()
		s.wg.Wait()
	}()
	s.reap(ctx)
	reap := time.NewTicker(s.opts.ReapEvery)
	defer reap.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reap.C:
			s.reap(ctx)
		case rec := <-s.starts:
			s.spawn(ctx, rec)
		}
	}
}

func (s *Service) reap(ctx context.Context) {
	n, err := s.store.ReapStale(ctx, s.opts.StaleAfter, s.opts.Owner, s.now())
	switch {
	case err != nil && ctx.Err() == nil:
		s.log.Warn("benchmark: fail runs of dead replicas", "err", err)
	case n > 0:
		s.log.Warn("benchmark: failed runs whose replica stopped watching them", "runs", n)
	}
}

func (s *Service) spawn(ctx context.Context, rec domain.Record) {
	wctx, cancel := context.WithCancelCause(ctx)
	w := &watch{cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	s.watches[rec.Run.ID] = w
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(w.done)
		defer func() {
			s.mu.Lock()
			delete(s.watches, rec.Run.ID)
			s.mu.Unlock()
			cancel(nil)
		}()
		newWatcher(s, rec).run(wctx)
	}()
}

// Start validates p, records a new run, creates its targets due
// Options.Lead after arrived (or, when creating them takes longer, just
// after they are committed) and hands the run to the watcher. It returns
// the run waiting for its due time. Errors: *domain.ValidationError,
// *BusyError (another run is active), ErrStopped, ErrCancelledWhileCreating,
// or a storage error. When ctx ends while the targets are being created,
// nothing is created and the run is failed.
func (s *Service) Start(ctx context.Context, p domain.Params, arrived time.Time) (domain.Run, error) {
	if err := p.Validate(s.opts.MaxNotifications); err != nil {
		return domain.Run{}, err
	}
	select {
	case <-s.stopped:
		return domain.Run{}, ErrStopped
	default:
	}
	// The secret goes to the targets only: never stored with the run.
	secret := p.WebhookSecret
	p.WebhookSecret = ""
	arrived = arrived.UTC().Truncate(time.Microsecond)
	run := domain.Run{
		ID: newRunID(), Status: domain.StatusCreating, Params: p,
		CreatedAt: arrived, DueAt: arrived.Add(s.opts.Lead),
	}
	if p.Channel == domain.ChannelWebhook {
		if err := s.checkTarget(ctx, run); err != nil {
			return domain.Run{}, err
		}
	}
	if err := s.insert(ctx, run); err != nil {
		return domain.Run{}, err
	}
	created, err := s.createTargets(ctx, run, secret)
	if err != nil {
		if _, ferr := s.store.Fail(context.WithoutCancel(ctx), run.ID, "creating the targets failed: "+err.Error(), s.now()); ferr != nil {
			s.log.Error("benchmark: fail run", "run", run.ID, "err", ferr)
		}
		return domain.Run{}, err
	}
	setup := created.CommittedAt.Sub(arrived).Seconds()
	if created.CommittedAt.After(created.DueAt) {
		s.log.Warn("benchmark: targets committed after their due time; totalSec includes part of the setup",
			"run", run.ID, "late", created.CommittedAt.Sub(created.DueAt))
	}
	ok, err := s.store.MarkWaiting(ctx, run.ID, created.Range, created.Count, created.DueAt, setup)
	if err != nil {
		if _, ferr := s.store.Fail(context.WithoutCancel(ctx), run.ID, "recording the created targets failed: "+err.Error(), s.now()); ferr != nil {
			s.log.Error("benchmark: fail run", "run", run.ID, "err", ferr)
		}
		return domain.Run{}, err
	}
	if !ok {
		if err := s.deleteRows(context.WithoutCancel(ctx), created.Range); err != nil {
			s.log.Error("benchmark: delete the targets of a run cancelled while creating", "run", run.ID, "err", err)
		}
		return domain.Run{}, ErrCancelledWhileCreating
	}
	rec, err := s.store.GetRun(ctx, run.ID)
	if err != nil {
		return domain.Run{}, err
	}
	select {
	case s.starts <- rec:
	case <-s.stopped:
		if _, err := s.store.Fail(context.WithoutCancel(ctx), run.ID, errStoppedRunText, s.now()); err != nil {
			s.log.Error("benchmark: fail run", "run", run.ID, "err", err)
		}
		return domain.Run{}, ErrStopped
	case <-ctx.Done():
		if _, err := s.store.Fail(context.WithoutCancel(ctx), run.ID, "the request ended before the run was handed to its watcher", s.now()); err != nil {
			s.log.Error("benchmark: fail run", "run", run.ID, "err", err)
		}
		return domain.Run{}, ctx.Err()
	}
	s.log.Info("benchmark run started", "run", run.ID, "notifications", p.Notifications, "recipients", p.Recipients,
		"channel", p.Channel, "due_at", rec.Run.DueAt, "setup_sec", setup)
	return rec.Run, nil
}

// insert records run, failing the active run first if its replica is
// dead; a live active run gives *BusyError.
func (s *Service) insert(ctx context.Context, run domain.Run) error {
	err := s.store.InsertRun(ctx, run, s.opts.Owner)
	if errors.Is(err, domain.ErrBusy) {
		s.reap(ctx)
		err = s.store.InsertRun(ctx, run, s.opts.Owner)
	}
	if errors.Is(err, domain.ErrBusy) {
		busy := &BusyError{}
		if rec, aerr := s.store.ActiveRun(ctx); aerr == nil {
			busy.ID, busy.Status = rec.Run.ID, rec.Run.Status
		}
		return busy
	}
	return err
}

// deleteRows deletes what the pipeline stored for the run: its targets,
// outbox rows and the sink's rows.
func (s *Service) deleteRows(ctx context.Context, rng domain.TargetRange) error {
	if err := s.targets.Delete(ctx, rng); err != nil {
		return err
	}
	return s.persisted.Delete(ctx, rng)
}

// Get returns run id, with its progress and, when finished, its report
// (domain.ErrNotFound when unknown). It reads the database, so any replica
// answers.
func (s *Service) Get(ctx context.Context, id string) (domain.Run, error) {
	rec, err := s.store.GetRun(ctx, id)
	return rec.Run, err
}

// List returns up to limit runs (default 50, at most 500), newest first,
// with their reports but without the series.
func (s *Service) List(ctx context.Context, limit int) ([]domain.Run, error) {
	if limit <= 0 {
		limit = defaultListLimit
	}
	runs, err := s.store.ListRuns(ctx, min(limit, maxListLimit), true)
	for i := range runs {
		if runs[i].Report != nil {
			runs[i].Report.Series = nil
		}
	}
	return runs, err
}

// Cancel cancels run id if it is not final (its watcher stops, here or in
// the replica that owns it at its next sample), then deletes the run's
// targets, outbox rows, the sink's rows and the simulated sends (a run
// still creating its targets has none committed: its Start deletes them
// once committed). A final run keeps its status and report; its rows are
// deleted all the same. It returns the run as stored after
// (domain.ErrNotFound when unknown).
func (s *Service) Cancel(ctx context.Context, id string) (domain.Run, error) {
	rec, err := s.store.GetRun(ctx, id)
	if err != nil {
		return domain.Run{}, err
	}
	if !rec.Run.Status.Final() {
		if _, err := s.store.Cancel(ctx, id, s.now()); err != nil {
			return domain.Run{}, err
		}
	}
	s.mu.Lock()
	w := s.watches[id]
	s.mu.Unlock()
	if w != nil {
		w.cancel(errCancelled)
		select {
		case <-w.done:
		case <-ctx.Done():
			return domain.Run{}, ctx.Err()
		}
	}
	// A run still creating has uncommitted targets: Start deletes them
	// when it finds the run cancelled after its commit.
	if rec.Run.Status != domain.StatusCreating {
		if err := s.deleteRows(ctx, rec.Targets); err != nil {
			return domain.Run{}, err
		}
	}
	if err := s.sends.Delete(ctx, id); err != nil {
		return domain.Run{}, err
	}
	s.log.Info("benchmark run cancelled and its rows deleted", "run", id, "was", rec.Run.Status)
	return s.Get(ctx, id)
}

// newRunID returns a random UUID (version 4).
func newRunID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/notiflow/notiflow/lib/netguard"
	"github.com/notiflow/notiflow/lib/webhooksig"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// TargetStore persists targets.
type TargetStore interface {
	// CreateTargets inserts all targets or none and returns their ids.
	CreateTargets(ctx context.Context, targets []domain.Target) ([]int64, error)
	GetTarget(ctx context.Context, id int64) (domain.Target, error)
	ListTargets(ctx context.Context, afterID int64, limit int) ([]domain.Target, error)
	// UpdateTarget applies change to the locked target and stores the
	// result's status and next run.
	UpdateTarget(ctx context.Context, id int64, change func(domain.Target) (domain.Target, error)) (domain.Target, error)
	// DeletedVersion returns the version of target id if it is deleted
	// (found false when it does not exist or is not deleted).
	DeletedVersion(ctx context.Context, id int64) (version uint64, found bool, err error)
}

// TemplateCatalog answers whether a target may use a template
// (implemented by Templates).
type TemplateCatalog interface {
	// CheckUse returns a *domain.ValidationError when template id is
	// unknown, is bound to a channel other than channel, or declares
	// params that the JSON object params lacks.
	CheckUse(ctx context.Context, id, channel string, params []byte) error
}

// TargetInput is a target as a client describes it. Exactly one of DueAt
// and Cron must be set; TimeZone applies to Cron only ("" means UTC).
type TargetInput struct {
	RecipientID string
	Channel     string
	WebhookURL  string
	TemplateID  string
	Params      []byte
	DueAt       *time.Time
	Cron        string
	TimeZone    string
}

// BulkError says which target of a bulk request is invalid.
type BulkError struct {
	Index int
	Err   *domain.ValidationError
}

func (e *BulkError) Error() string {
	return fmt.Sprintf("targets[%d].%s: %s", e.Index, e.Err.Field, e.Err.Msg)
}

func (e *BulkError) Unwrap() error { return e.Err }

// ErrTooMany: a bulk request over the configured maximum.
var ErrTooMany = errors.New("too many targets in one request")

// Targets is the use-case layer of the targets API. It is safe for
// concurrent use.
type Targets struct {
	store   TargetStore
	limits  domain.Limits
	bulkMax int
	clock   func() time.Time
	secrets *WebhookSecrets
	// hooks and resolver check webhook destinations (CheckTarget); nil
	// hooks: not checked.
	hooks    *netguard.Guard
	resolver netguard.Resolver
	// verdicts caches the guard's answer per webhook host for
	// hostVerdictTTL, so that a bulk create resolves each host once.
	verdictsMu sync.Mutex
	verdicts   map[string]hostVerdict
	// templates checks template ids and params (CheckTarget); nil: not
	// checked.
	templates TemplateCatalog
	fences    *Fences
}

// NewTargets returns the targets service; bulk requests carry at most
// bulkMax targets.
func NewTargets(store TargetStore, limits domain.Limits, bulkMax int, clock func() time.Time) *Targets {
	if clock == nil {
		clock = time.Now
	}
	return &Targets{store: store, limits: limits, bulkMax: bulkMax, clock: clock}
}

// UseSecrets makes the targets' webhook secrets reach Redis through w
// when they are created (call it before serving). Without it they are
// only stored in MySQL, for w.Run to copy.
func (s *Targets) UseSecrets(w *WebhookSecrets) { s.secrets = w }

// UseWebhookGuard makes CheckTarget refuse webhook URLs whose host is, or
// resolves (with r; nil: net.DefaultResolver) only to, an address g
// forbids (call it before serving).
func (s *Targets) UseWebhookGuard(g *netguard.Guard, r netguard.Resolver) {
	if r == nil {
		r = net.DefaultResolver
	}
	s.hooks, s.resolver = g, r
}

// UseTemplates makes CheckTarget check template ids and params against c
// (call it before serving).
func (s *Targets) UseTemplates(c TemplateCatalog) { s.templates = c }

// UseFences makes every change of a target (Patch, Pause, Resume, Delete)
// settle its fence through f before it returns (call it before serving).
// Without it changes are only stored in MySQL.
func (s *Targets) UseFences(f *Fences) { s.fences = f }

// BulkMax is the most targets one bulk request may carry.
func (s *Targets) BulkMax() int { return s.bulkMax }

// Build validates in and returns the target it describes, active, with its
// first run computed from now. Errors are *domain.ValidationError.
func (s *Targets) Build(in TargetInput, now time.Time) (domain.Target, error) {
	var sched domain.Schedule
	switch {
	case in.DueAt != nil && in.Cron != "":
		return domain.Target{}, &domain.ValidationError{Field: "schedule", Msg: "give either due_at or cron, not both"}
	case in.DueAt == nil && in.Cron == "":
		return domain.Target{}, &domain.ValidationError{Field: "schedule", Msg: "give either due_at or cron"}
	case in.DueAt != nil:
		if in.TimeZone != "" {
			return domain.Target{}, &domain.ValidationError{Field: "time_zone", Msg: "applies to cron schedules only (due_at carries its own offset)"}
		}
		if in.DueAt.IsZero() {
			return domain.Target{}, &domain.ValidationError{Field: "due_at", Msg: "must be a time"}
		}
		sched = domain.OneShot(*in.DueAt)
	default:
		var err error
		sched, err = domain.ParseCron(in.Cron, in.TimeZone)
		switch {
		case errors.Is(err, domain.ErrBadTimeZone):
			return domain.Target{}, &domain.ValidationError{Field: "time_zone", Msg: err.Error()}
		case err != nil:
			return domain.Target{}, &domain.ValidationError{Field: "cron", Msg: err.Error()}
		}
	}
	t, err := domain.NewTarget(in.RecipientID, domain.Channel(in.Channel), in.WebhookURL, in.TemplateID, in.Params, sched, now, s.limits)
	if err != nil {
		return domain.Target{}, err
	}
	t.CreatedAt, t.UpdatedAt = now, now
	return t, nil
}

// hostVerdictTTL bounds how long CheckTarget reuses the guard's answer
// for a webhook host (the dispatcher's dial-time check covers a host
// whose addresses change meanwhile).
const hostVerdictTTL = 10 * time.Second

type hostVerdict struct {
	err error
	at  time.Time
}

// checkHost runs the webhook guard on host, through the verdicts cache.
func (s *Targets) checkHost(ctx context.Context, host string) error {
	now := time.Now()
	s.verdictsMu.Lock()
	v, ok := s.verdicts[host]
	s.verdictsMu.Unlock()
	if ok && now.Sub(v.at) < hostVerdictTTL {
		return v.err
	}
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	err := s.hooks.CheckResolved(lctx, s.resolver, host)
	if ctx.Err() != nil {
		return err
	}
	s.verdictsMu.Lock()
	if s.verdicts == nil || len(s.verdicts) > 10000 {
		s.verdicts = map[string]hostVerdict{}
	}
	s.verdicts[host] = hostVerdict{err: err, at: now}
	s.verdictsMu.Unlock()
	return err
}

// lookupTimeout bounds the DNS lookup of a webhook host in CheckTarget.
const lookupTimeout = 2 * time.Second

// CheckTarget is the target validation that needs the outside world, run
// by every path that creates or changes a target through the API (Create,
// CreateBulk; a path that changes a target's template, params, channel or
// webhook_url calls it too) after Build's checks:
//   - the template exists (a managed template, or a built-in or file one)
//     and t.Params carries every parameter it declares (field params, the
//     missing names listed); a template bound to a channel accepts only
//     targets of that channel;
//   - a webhook target's URL host is not, and does not resolve only to, an
//     address the dispatcher's guard refuses (field webhook_url).
//
// Errors are *domain.ValidationError, or the template store's failure.
// Benchmark runs (Runs.Create) skip it for each target: their targets
// share the built-in "bench" template, channel and webhook URL, and a
// webhook run checks one of them first (Runs.Check).
func (s *Targets) CheckTarget(ctx context.Context, t domain.Target) error {
	if s.templates != nil {
		if err := s.templates.CheckUse(ctx, t.TemplateID, string(t.Channel), t.Params); err != nil {
			return err
		}
	}
	if s.hooks != nil && t.Channel == domain.ChannelWebhook {
		u, err := url.Parse(t.WebhookURL)
		if err != nil {
			return &domain.ValidationError{Field: "webhook_url", Msg: "must be an absolute http or https URL"}
		}
		if err := s.checkHost(ctx, u.Hostname()); err != nil {
			var fe *netguard.ForbiddenAddressError
			if errors.As(err, &fe) {
				return &domain.ValidationError{Field: "webhook_url", Msg: fmt.Sprintf("%s is a %s address, refused for webhooks (allow it with NOTIFLOW_WEBHOOK_ALLOW)", fe.Addr, fe.Reason)}
			}
			return &domain.ValidationError{Field: "webhook_url", Msg: err.Error()}
		}
	}
	return nil
}

// Create validates and stores one target; a webhook target is returned
// with its new WebhookSecret (see CreateMany).
func (s *Targets) Create(ctx context.Context, in TargetInput) (domain.Target, error) {
	now := s.clock().UTC().Truncate(time.Microsecond)
	t, err := s.Build(in, now)
	if err != nil {
		return domain.Target{}, err
	}
	if err := s.CheckTarget(ctx, t); err != nil {
		return domain.Target{}, err
	}
	ts := []domain.Target{t}
	ids, err := s.CreateMany(ctx, ts, "")
	if err != nil {
		return domain.Target{}, err
	}
	ts[0].ID = ids[0]
	return ts[0], nil
}

// CreateBulk validates every input and stores them all in one transaction,
// or stores nothing: the first invalid input is reported as a *BulkError,
// more than BulkMax inputs as ErrTooMany. It returns the targets in input
// order with their ids and, for webhook targets, their new WebhookSecret.
func (s *Targets) CreateBulk(ctx context.Context, ins []TargetInput) ([]domain.Target, error) {
	if len(ins) > s.bulkMax {
		return nil, fmt.Errorf("%w: %d targets, the limit is %d", ErrTooMany, len(ins), s.bulkMax)
	}
	now := s.clock().UTC().Truncate(time.Microsecond)
	targets := make([]domain.Target, len(ins))
	for i, in := range ins {
		t, err := s.Build(in, now)
		if err == nil {
			err = s.CheckTarget(ctx, t)
		}
		if err != nil {
			var ve *domain.ValidationError
			if errors.As(err, &ve) {
				return nil, &BulkError{Index: i, Err: ve}
			}
			return nil, err
		}
		targets[i] = t
	}
	ids, err := s.CreateMany(ctx, targets, "")
	if err != nil {
		return nil, err
	}
	for i := range targets {
		targets[i].ID = ids[i]
	}
	return targets, nil
}

// CreateMany stores already built targets (see Build) in one transaction,
// tagged with runID when it is not empty. It is the last step of
// CreateBulk and the path benchmark runs create their targets by
// (Runs.Create); it applies no count limit. Every webhook target gets a
// new signing secret (webhooksig.Generate), set in its WebhookSecret and
// stored with it, unless it carries one already (only a benchmark run
// gives its targets one: Build never sets it); once committed, the secrets
// are written to Redis (see WebhookSecrets).
func (s *Targets) CreateMany(ctx context.Context, targets []domain.Target, runID string) ([]int64, error) {
	if len(runID) > domain.MaxRunIDLen {
		return nil, &domain.ValidationError{Field: "run_id", Msg: fmt.Sprintf("longer than %d bytes", domain.MaxRunIDLen)}
	}
	if runID != "" {
		for i := range targets {
			targets[i].RunID = runID
		}
	}
	for i := range targets {
		if targets[i].Channel != domain.ChannelWebhook || targets[i].WebhookSecret != "" {
			continue
		}
		secret, err := webhooksig.Generate()
		if err != nil {
			return nil, err
		}
		targets[i].WebhookSecret = secret
	}
	ids, err := s.store.CreateTargets(ctx, targets)
	if err != nil {
		return nil, err
	}
	if s.secrets != nil {
		s.secrets.created(ctx, targets, ids)
	}
	return ids, nil
}

// Get returns a target (domain.ErrNotFound when missing or deleted).
func (s *Targets) Get(ctx context.Context, id int64) (domain.Target, error) {
	return s.store.GetTarget(ctx, id)
}

// List returns up to limit targets after the id cursor, and the cursor of
// the next page (0 when this is the last page).
func (s *Targets) List(ctx context.Context, after int64, limit int) ([]domain.Target, int64, error) {
	ts, err := s.store.ListTargets(ctx, after, limit+1)
	if err != nil {
		return nil, 0, err
	}
	if len(ts) > limit {
		ts = ts[:limit]
		return ts, ts[limit-1].ID, nil
	}
	return ts, 0, nil
}

// Pause stops a target from firing until it is resumed. It returns once
// the target's fence is settled (see Fences): from then on no occurrence
// of the target claimed before the pause is sent. Pausing a paused target
// changes nothing and settles the fence again (a retry after
// ErrFenceNotSettled).
func (s *Targets) Pause(ctx context.Context, id int64) (domain.Target, error) {
	now := s.clock().UTC().Truncate(time.Microsecond)
	t, err := s.store.UpdateTarget(ctx, id, func(t domain.Target) (domain.Target, error) { return t.Pause(now) })
	if err != nil {
		return domain.Target{}, err
	}
	return t, s.fence(ctx, t)
}

// Resume re-activates a paused target, computing its next run from now,
// and settles its fence like Pause (occurrences claimed before the pause
// stay fenced).
func (s *Targets) Resume(ctx context.Context, id int64) (domain.Target, error) {
	now := s.clock().UTC().Truncate(time.Microsecond)
	t, err := s.store.UpdateTarget(ctx, id, func(t domain.Target) (domain.Target, error) { return t.Resume(now) })
	if err != nil {
		return domain.Target{}, err
	}
	return t, s.fence(ctx, t)
}

// Delete marks a target deleted and returns once its fence is settled
// (see Pause). Deleting a deleted target answers domain.ErrNotFound like
// a missing one, but only after settling its fence again (when fences are
// in use), so that a retry after ErrFenceNotSettled waits again and its
// answer, 404 included, means that nothing of the target is sent any
// more.
func (s *Targets) Delete(ctx context.Context, id int64) error {
	now := s.clock().UTC().Truncate(time.Microsecond)
	t, err := s.store.UpdateTarget(ctx, id, func(t domain.Target) (domain.Target, error) { return t.Delete(now) })
	if errors.Is(err, domain.ErrNotFound) && s.fences != nil {
		v, found, verr := s.store.DeletedVersion(ctx, id)
		if verr != nil {
			return verr
		}
		if !found {
			return err
		}
		if serr := s.fences.Settle(ctx, id, v); serr != nil {
			return serr
		}
		return err
	}
	if err != nil {
		return err
	}
	return s.fence(ctx, t)
}

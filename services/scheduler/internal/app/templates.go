package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/notiflow/notiflow/lib/templates"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// Errors of the templates service, for callers to branch on.
var (
	ErrTemplateNotFound = errors.New("template not found")
	ErrTemplateExists   = errors.New("template exists")
	// ErrTemplateInUse: a delete of a template that live (active or
	// paused) targets still name; the message says how many.
	ErrTemplateInUse = errors.New("template in use")
	// ErrTemplateBreaksTargets: an update whose new version live (active
	// or paused) targets of the template would fail at send time with (a
	// channel binding other than theirs, or params they lack); the
	// message names the problem, how many targets and the first ids.
	ErrTemplateBreaksTargets = errors.New("template update breaks live targets")
)

// TemplateRecord is a managed template as stored.
type TemplateRecord struct {
	templates.Template
	CreatedAt, UpdatedAt time.Time
}

// TemplateStore keeps the managed templates, their owner
// (adapters.MySQLStore, table templates).
type TemplateStore interface {
	// CreateTemplate stores t as version 1, or, when the name was used by
	// a deleted template, as the version after its tombstone's
	// (ErrTemplateExists when a live template has the name).
	CreateTemplate(ctx context.Context, t templates.Template, now time.Time) (TemplateRecord, error)
	// UpdateTemplate replaces the live template t.Name with t, one version
	// up (ErrTemplateNotFound), unless, checked in the same transaction,
	// live (active or paused) targets that name it use another channel
	// than t binds or lack params t declares (ErrTemplateBreaksTargets).
	UpdateTemplate(ctx context.Context, t templates.Template, now time.Time) (TemplateRecord, error)
	// DeleteTemplate turns live template name into a tombstone, one
	// version up, unless live targets name it (ErrTemplateInUse,
	// ErrTemplateNotFound).
	DeleteTemplate(ctx context.Context, name string, now time.Time) (TemplateRecord, error)
	// GetTemplate returns live template name (ErrTemplateNotFound).
	GetTemplate(ctx context.Context, name string) (TemplateRecord, error)
	// ListTemplates returns the templates by name, tombstones too when
	// withDeleted.
	ListTemplates(ctx context.Context, withDeleted bool) ([]TemplateRecord, error)
}

// TemplateCopy is the copy of the managed templates the dispatchers read
// (adapters.TemplateCopy over Redis, format of lib/templates).
type TemplateCopy interface {
	// Put writes ts (tombstones included), never replacing a higher
	// version.
	Put(ctx context.Context, ts []templates.Template) error
}

// TemplatesOptions tune Templates.
type TemplatesOptions struct {
	// Static are the built-in and file templates (id -> text): they cannot
	// be managed, and targets may use them.
	Static map[string]string
	// SyncEvery is how often Run copies every template to Redis; it must
	// be positive for Run.
	SyncEvery time.Duration
	// Clock is the clock (tests); time.Now by default.
	Clock func() time.Time
}

// useCacheTTL bounds how long CheckUse reuses a managed template it read,
// so that a bulk create of many targets of one template reads it once.
const useCacheTTL = time.Second

// Templates is the use-case layer of the managed templates: it checks
// them at the door (templates.Check), stores them in MySQL, their source
// of truth, and keeps their Redis copy, from which the dispatchers render,
// in step: each change is written to Redis right after its commit (a
// failed write is logged; Run's next pass repairs it), and Run copies
// every template, tombstones included, every SyncEvery. Writes are
// guarded by version, so a late one never undoes a newer one. A change is
// seen by a dispatcher within its NOTIFLOW_TEMPLATE_CACHE of reaching
// Redis. It is safe for concurrent use.
type Templates struct {
	store TemplateStore
	copy  TemplateCopy
	opt   TemplatesOptions
	log   *slog.Logger
	// static maps the built-in and file template ids to the parameters
	// their texts refer to.
	static map[string][]string

	mu   sync.Mutex
	used map[string]usedTemplate
}

type usedTemplate struct {
	rec  TemplateRecord
	read time.Time
}

// NewTemplates returns the templates service; it fails when a static
// template does not parse.
func NewTemplates(store TemplateStore, cp TemplateCopy, opt TemplatesOptions, log *slog.Logger) (*Templates, error) {
	if opt.Clock == nil {
		opt.Clock = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Templates{store: store, copy: cp, opt: opt, log: log, static: map[string][]string{}, used: map[string]usedTemplate{}}
	for id, text := range opt.Static {
		refs, err := templates.TextRefs(id, text)
		if err != nil {
			return nil, fmt.Errorf("template %q: %w", id, err)
		}
		s.static[id] = refs
	}
	return s, nil
}

// StaticTemplates returns the built-in templates overlaid with those of
// the templates file data (templates.ParseFile; nil: none).
func StaticTemplates(data []byte) (map[string]string, error) {
	m := templates.Builtin()
	if data == nil {
		return m, nil
	}
	extra, err := templates.ParseFile(data)
	if err != nil {
		return nil, err
	}
	maps.Copy(m, extra)
	return m, nil
}

func (s *Templates) now() time.Time { return s.opt.Clock().UTC().Truncate(time.Microsecond) }

// checkNew validates t for Create and Update (*templates.FieldError, or
// ErrTemplateExists for a static template's name).
func (s *Templates) checkNew(t templates.Template) (templates.Template, error) {
	t, err := templates.Check(t)
	if err != nil {
		return t, err
	}
	if _, ok := s.static[t.Name]; ok {
		return t, fmt.Errorf("%w: %q is a built-in or file template", ErrTemplateExists, t.Name)
	}
	return t, nil
}

// Create checks and stores a new template (version 1, or the one after
// its name's tombstone) and copies it to Redis.
func (s *Templates) Create(ctx context.Context, t templates.Template) (TemplateRecord, error) {
	t, err := s.checkNew(t)
	if err != nil {
		return TemplateRecord{}, err
	}
	rec, err := s.store.CreateTemplate(ctx, t, s.now())
	if err != nil {
		return TemplateRecord{}, err
	}
	s.publish(ctx, rec.Template)
	return rec, nil
}

// Update checks t and makes it the next version of live template t.Name;
// notifications rendered after the dispatchers see it use it. A version
// that live targets of the template would fail with at send time (a
// channel binding other than theirs, params they lack) is refused with
// ErrTemplateBreaksTargets.
func (s *Templates) Update(ctx context.Context, t templates.Template) (TemplateRecord, error) {
	t, err := s.checkNew(t)
	if err != nil {
		return TemplateRecord{}, err
	}
	rec, err := s.store.UpdateTemplate(ctx, t, s.now())
	if err != nil {
		return TemplateRecord{}, err
	}
	s.publish(ctx, rec.Template)
	return rec, nil
}

// Delete deletes live template name unless live targets use it
// (ErrTemplateInUse, saying how many).
func (s *Templates) Delete(ctx context.Context, name string) error {
	rec, err := s.store.DeleteTemplate(ctx, name, s.now())
	if err != nil {
		return err
	}
	s.publish(ctx, rec.Template)
	return nil
}

// Get returns live template name (ErrTemplateNotFound).
func (s *Templates) Get(ctx context.Context, name string) (TemplateRecord, error) {
	return s.store.GetTemplate(ctx, name)
}

// List returns the live templates by name.
func (s *Templates) List(ctx context.Context) ([]TemplateRecord, error) {
	return s.store.ListTemplates(ctx, false)
}

func (s *Templates) publish(ctx context.Context, t templates.Template) {
	s.mu.Lock()
	delete(s.used, t.Name)
	s.mu.Unlock()
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := s.copy.Put(pctx, []templates.Template{t}); err != nil {
		s.log.Warn("template not written to redis; the next sync writes it", "template", t.Name, "version", t.Version, "err", err)
	}
}

// CheckUse implements TemplateCatalog: template id must be a static
// template or a live managed one (field template_id), bound to no channel
// or to channel (field channel), and params must have a member for every
// parameter it declares (field params, listing the missing names). A
// static template declares the parameters its text refers to.
func (s *Templates) CheckUse(ctx context.Context, id, channel string, params []byte) error {
	declared, ok := s.static[id]
	if !ok {
		rec, err := s.lookup(ctx, id)
		switch {
		case errors.Is(err, ErrTemplateNotFound):
			return &domain.ValidationError{Field: "template_id", Msg: fmt.Sprintf("unknown template %q (create it with POST /v1/templates)", id)}
		case err != nil:
			return fmt.Errorf("check template %q: %w", id, err)
		case rec.Channel != "" && rec.Channel != channel:
			return &domain.ValidationError{Field: "channel", Msg: fmt.Sprintf("template %q is for channel %s only", id, rec.Channel)}
		}
		declared = rec.Params
	}
	missing, err := templates.Missing(declared, params)
	if err != nil {
		return &domain.ValidationError{Field: "params", Msg: err.Error()}
	}
	if len(missing) > 0 {
		return &domain.ValidationError{Field: "params", Msg: fmt.Sprintf("missing %s, declared by template %q", strings.Join(missing, ", "), id)}
	}
	return nil
}

// lookup reads managed template name, reusing a read of the last
// useCacheTTL (changes made through this process drop it at once).
func (s *Templates) lookup(ctx context.Context, name string) (TemplateRecord, error) {
	now := time.Now()
	s.mu.Lock()
	u, ok := s.used[name]
	s.mu.Unlock()
	if ok && now.Sub(u.read) < useCacheTTL {
		return u.rec, nil
	}
	rec, err := s.store.GetTemplate(ctx, name)
	if err != nil {
		return rec, err
	}
	s.mu.Lock()
	if len(s.used) > 1000 {
		clear(s.used)
	}
	s.used[name] = usedTemplate{rec: rec, read: now}
	s.mu.Unlock()
	return rec, nil
}

// Sync copies every template, tombstones included, to Redis.
func (s *Templates) Sync(ctx context.Context) error {
	recs, err := s.store.ListTemplates(ctx, true)
	if err != nil {
		return err
	}
	ts := make([]templates.Template, len(recs))
	for i, r := range recs {
		ts[i] = r.Template
	}
	return s.copy.Put(ctx, ts)
}

// Run syncs at start and every SyncEvery until ctx ends, then returns
// nil; a failed pass is logged and retried sooner, with backoff. It
// returns an error only when SyncEvery is not positive.
func (s *Templates) Run(ctx context.Context) error {
	return keepCopy(ctx, "templates", s.opt.SyncEvery, 100*time.Millisecond, s.log, "",
		func(ctx context.Context, _ bool, _ time.Time) (time.Time, error) { return time.Time{}, s.Sync(ctx) })
}

package adapters

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/lib/templates"
	"github.com/notiflow/notiflow/services/dispatcher/internal/domain"
)

// Templates renders notifications from the built-in and file templates
// (fixed for the process's life) and, for any other id, from the managed
// templates the scheduler copies to Redis (templates.Key, under the Redis
// prefix). A managed template is read from Redis at most once per cacheTTL
// per id, absence included, so an update, creation or deletion is seen
// within cacheTTL of reaching Redis. It is safe for concurrent use.
type Templates struct {
	static *domain.Templates
	rdb    redis.Cmdable
	prefix string
	ttl    time.Duration
	now    func() time.Time

	mu    sync.Mutex
	cache map[string]cachedTemplate
}

type cachedTemplate struct {
	parsed *domain.Parsed // nil: no such managed template
	read   time.Time
}

// NewTemplates returns the renderer over static and the managed templates
// under prefix in rdb, cached for cacheTTL (0: read on every render).
func NewTemplates(static *domain.Templates, rdb redis.Cmdable, prefix string, cacheTTL time.Duration) *Templates {
	return &Templates{static: static, rdb: rdb, prefix: prefix, ttl: cacheTTL, now: time.Now, cache: map[string]cachedTemplate{}}
}

// Render renders template id with the JSON object params and returns the
// text and the version it was rendered with (a content hash for built-in
// and file templates, the version number for managed ones). Errors
// wrapping domain.ErrUnknownTemplate or domain.ErrRender are final for
// these params; any other error is Redis failing (or ctx ending), worth a
// retry.
func (t *Templates) Render(ctx context.Context, id string, params []byte) (string, string, error) {
	if t.static.Has(id) {
		body, err := t.static.Render(id, params)
		return body, t.static.Version(id), err
	}
	p, err := t.managed(ctx, id)
	if err != nil {
		return "", "", err
	}
	if p == nil {
		return "", "", fmt.Errorf("%w %q", domain.ErrUnknownTemplate, id)
	}
	body, err := p.Render(params)
	return body, p.Version(), err
}

// managed returns managed template id, nil when there is none.
func (t *Templates) managed(ctx context.Context, id string) (*domain.Parsed, error) {
	now := t.now()
	t.mu.Lock()
	c, ok := t.cache[id]
	t.mu.Unlock()
	if ok && now.Sub(c.read) < t.ttl {
		return c.parsed, nil
	}
	mt, found, err := templates.Load(ctx, t.rdb, t.prefix, id)
	if err != nil {
		return nil, err
	}
	var p *domain.Parsed
	if found {
		if p, err = domain.ParseTemplate(id, mt.Text(), mt.VersionLabel()); err != nil {
			return nil, fmt.Errorf("%w: %v", domain.ErrRender, err)
		}
	}
	t.mu.Lock()
	if len(t.cache) > maxCachedTemplates {
		clear(t.cache)
	}
	t.cache[id] = cachedTemplate{parsed: p, read: now}
	t.mu.Unlock()
	return p, nil
}

// maxCachedTemplates bounds the cache (ids of unknown templates included):
// past it the cache starts afresh.
const maxCachedTemplates = 10000

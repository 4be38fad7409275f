package adapters

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/lib/templates"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/dispatcher/internal/domain"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// TestManagedTemplatesCacheBound: against a real Redis, a managed template
// renders with its version; a change written to Redis is used once the
// cache TTL has passed since the last read and not before (the stated
// bound); a tombstone makes the id unknown; built-in templates never touch
// Redis; Redis failing is neither ErrUnknownTemplate nor ErrRender (the
// dispatcher retries it).
func TestManagedTemplatesCacheBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testkit.Redis(t)
	static, err := domain.NewTemplates(nil)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 5 * time.Second
	clk := &fakeClock{t: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
	tpls := NewTemplates(static, rdb, prefix, ttl)
	tpls.now = clk.Now
	render := func() (string, string, error) {
		return tpls.Render(ctx, "ship", []byte(`{"id":7}`))
	}
	if _, _, err := render(); !errors.Is(err, domain.ErrUnknownTemplate) {
		t.Fatalf("before the template exists: %v, want ErrUnknownTemplate", err)
	}
	store := func(tpl templates.Template) {
		t.Helper()
		if err := templates.Store(ctx, rdb, prefix, tpl); err != nil {
			t.Fatal(err)
		}
	}
	store(templates.Template{Name: "ship", Subject: "Order {{.id}}", Body: "v1 {{.id}}", Params: []string{"id"}, Version: 1})
	// The absence was cached: still unknown until the TTL has passed.
	if _, _, err := render(); !errors.Is(err, domain.ErrUnknownTemplate) {
		t.Fatalf("within the TTL of the miss: %v, want the cached absence", err)
	}
	clk.Add(ttl)
	if body, v, err := render(); err != nil || body != "Order 7\n\nv1 7" || v != "1" {
		t.Fatalf("after the TTL: %q %q %v, want version 1", body, v, err)
	}
	store(templates.Template{Name: "ship", Body: "v2 {{.id}}", Params: []string{"id"}, Version: 2})
	clk.Add(ttl - time.Millisecond)
	if body, v, _ := render(); body != "Order 7\n\nv1 7" || v != "1" {
		t.Fatalf("within the TTL: %q %q, want the cached version 1", body, v)
	}
	clk.Add(time.Millisecond)
	if body, v, err := render(); err != nil || body != "v2 7" || v != "2" {
		t.Fatalf("TTL after the last read: %q %q %v, want version 2", body, v, err)
	}
	if _, _, err := tpls.Render(ctx, "ship", []byte(`{}`)); !errors.Is(err, domain.ErrRender) {
		t.Fatalf("missing param: %v, want ErrRender", err)
	}
	store(templates.Template{Name: "ship", Version: 3, Deleted: true})
	clk.Add(ttl)
	if _, _, err := render(); !errors.Is(err, domain.ErrUnknownTemplate) {
		t.Fatalf("after the tombstone: %v, want ErrUnknownTemplate", err)
	}

	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = down.Close() })
	broken := NewTemplates(static, down, prefix, ttl)
	if body, v, err := broken.Render(ctx, "welcome", []byte(`{"name":"Ann"}`)); err != nil || body != "Welcome to notiflow, Ann!" || len(v) != 16 {
		t.Fatalf("built-in with Redis down: %q %q %v", body, v, err)
	}
	_, _, err = broken.Render(ctx, "ship", nil)
	if err == nil || errors.Is(err, domain.ErrUnknownTemplate) || errors.Is(err, domain.ErrRender) {
		t.Fatalf("managed with Redis down: %v, want a dependency error", err)
	}
}

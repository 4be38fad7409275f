package templates

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Key is the Redis key of managed template name under prefix (the
// services' NOTIFLOW_REDIS_PREFIX): a hash with fields v (the version) and
// t (the template as JSON, a tombstone once deleted).
func Key(prefix, name string) string { return prefix + "tpl:" + name }

// storeScript writes a template unless Redis holds a higher version.
// KEYS[1] the key; ARGV: version, JSON.
var storeScript = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], 'v'))
if cur and cur > tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 't', ARGV[2])
return 1
`)

// Store writes t (a tombstone when t.Deleted) under prefix unless Redis
// holds a higher version of it already, so that writes arriving out of
// order leave the newest. rdb may be a pipeline; its error is then known
// only once it executes.
func Store(ctx context.Context, rdb redis.Scripter, prefix string, t Template) error {
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode template %q: %w", t.Name, err)
	}
	err = storeScript.Eval(ctx, rdb, []string{Key(prefix, t.Name)}, t.Version, b).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("store template %q in redis: %w", t.Name, err)
	}
	return nil
}

// Load reads managed template name; ok is false when Redis has none or
// holds its tombstone.
func Load(ctx context.Context, rdb redis.Cmdable, prefix, name string) (t Template, ok bool, err error) {
	m, err := rdb.HGetAll(ctx, Key(prefix, name)).Result()
	if err != nil {
		return Template{}, false, fmt.Errorf("load template %q from redis: %w", name, err)
	}
	if m["t"] == "" {
		return Template{}, false, nil
	}
	if err := json.Unmarshal([]byte(m["t"]), &t); err != nil {
		return Template{}, false, fmt.Errorf("decode template %q from redis: %w", name, err)
	}
	if v, _ := strconv.ParseInt(m["v"], 10, 64); v != t.Version {
		return Template{}, false, fmt.Errorf("template %q in redis: version field %q, JSON version %d", name, m["v"], t.Version)
	}
	return t, !t.Deleted, nil
}

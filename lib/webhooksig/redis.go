package webhooksig

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Record is a target's secrets as stored in Redis: Current always, and
// Previous (the secret Current replaced) until PreviousUntil, the end of
// the rotation's grace period. Version grows with every rotation.
type Record struct {
	Version       int64
	Current       string
	Previous      string
	PreviousUntil time.Time
}

// Valid returns the secrets to sign with at now: Current, then Previous
// while now is before PreviousUntil.
func (r Record) Valid(now time.Time) []string {
	if r.Previous != "" && now.Before(r.PreviousUntil) {
		return []string{r.Current, r.Previous}
	}
	return []string{r.Current}
}

// RedisKey is the key of target's Record: <prefix>whsec:<target id>.
func RedisKey(prefix string, targetID uint64) string {
	return prefix + "whsec:" + strconv.FormatUint(targetID, 10)
}

// SyncedKey is the marker the scheduler sets after it has written every
// Record; its absence (a flushed or new Redis) asks for a full sync.
func SyncedKey(prefix string) string { return prefix + "whsec:synced" }

// storeScript writes a Record unless the stored one has a higher version.
var storeScript = redis.NewScript(`
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '-1')
if tonumber(ARGV[1]) < v then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'cur', ARGV[2], 'prev', ARGV[3], 'until', ARGV[4])
return 1
`)

// Store writes rec as target's Record unless Redis holds a higher version
// already. rdb may be a pipeline (the script is sent with each call, so no
// script cache is needed); its error is then known only once it executes.
func Store(ctx context.Context, rdb redis.Scripter, prefix string, targetID uint64, rec Record) error {
	until := int64(0)
	if !rec.PreviousUntil.IsZero() {
		until = rec.PreviousUntil.UnixMilli()
	}
	err := storeScript.Eval(ctx, rdb, []string{RedisKey(prefix, targetID)},
		rec.Version, rec.Current, rec.Previous, until).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("store webhook secret of target %d in redis: %w", targetID, err)
	}
	return nil
}

// Load reads target's Record; ok is false when Redis has none.
func Load(ctx context.Context, rdb redis.Cmdable, prefix string, targetID uint64) (rec Record, ok bool, err error) {
	m, err := rdb.HGetAll(ctx, RedisKey(prefix, targetID)).Result()
	if err != nil {
		return Record{}, false, fmt.Errorf("load webhook secret of target %d from redis: %w", targetID, err)
	}
	if m["cur"] == "" {
		return Record{}, false, nil
	}
	rec.Current, rec.Previous = m["cur"], m["prev"]
	rec.Version, _ = strconv.ParseInt(m["v"], 10, 64)
	if ms, _ := strconv.ParseInt(m["until"], 10, 64); ms > 0 {
		rec.PreviousUntil = time.UnixMilli(ms)
	}
	return rec, true, nil
}

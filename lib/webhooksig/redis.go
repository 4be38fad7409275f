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

// StoreNewer writes each of recs (target id -> Record) that Redis holds
// an older version of, or none, and returns how many it wrote. It reads
// the stored versions in one pipeline and Stores only the records behind
// in a second: for a sync that mostly finds its records in place already,
// a read per record instead of a script run and a write. A record stored
// at the same version is left as it is (a version has one content: it
// grows with every rotation). rdb is a client, not a pipeline.
func StoreNewer(ctx context.Context, rdb redis.Cmdable, prefix string, recs map[uint64]Record) (int, error) {
	if len(recs) == 0 {
		return 0, nil
	}
	ids := make([]uint64, 0, len(recs))
	gets := make([]*redis.StringCmd, 0, len(recs))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for id := range recs {
			ids = append(ids, id)
			gets = append(gets, p.HGet(ctx, RedisKey(prefix, id), "v"))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("read the versions of %d webhook secrets in redis: %w", len(recs), err)
	}
	var behind []uint64
	for i, get := range gets {
		stored := int64(-1)
		switch v, err := get.Result(); {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return 0, fmt.Errorf("read the version of the webhook secret of target %d in redis: %w", ids[i], err)
		default:
			if stored, err = strconv.ParseInt(v, 10, 64); err != nil {
				stored = -1 // not ours: Store's script decides
			}
		}
		if stored < recs[ids[i]].Version {
			behind = append(behind, ids[i])
		}
	}
	if len(behind) == 0 {
		return 0, nil
	}
	cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range behind {
			_ = Store(ctx, p, prefix, id, recs[id])
		}
		return nil
	})
	if err == nil {
		for _, c := range cmds {
			if cerr := c.Err(); cerr != nil && !errors.Is(cerr, redis.Nil) {
				err = cerr
				break
			}
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("store %d webhook secrets in redis: %w", len(behind), err)
	}
	return len(behind), nil
}

// Load reads target's Record; ok is false when Redis has none.
func Load(ctx context.Context, rdb redis.Cmdable, prefix string, targetID uint64) (rec Record, ok bool, err error) {
	m, err := rdb.HGetAll(ctx, RedisKey(prefix, targetID)).Result()
	if err != nil {
		return Record{}, false, fmt.Errorf("load webhook secret of target %d from redis: %w", targetID, err)
	}
	rec, ok = RecordOf(m)
	return rec, ok, nil
}

// LoadCmd is the command Load sends, for a caller that sends it itself
// (with others in one pipeline); RecordOf reads its reply.
func LoadCmd(ctx context.Context, prefix string, targetID uint64) *redis.MapStringStringCmd {
	return redis.NewMapStringStringCmd(ctx, "hgetall", RedisKey(prefix, targetID))
}

// RecordOf returns the Record in m, the reply of LoadCmd; ok is false when
// Redis had none.
func RecordOf(m map[string]string) (rec Record, ok bool) {
	if m["cur"] == "" {
		return Record{}, false
	}
	rec.Current, rec.Previous = m["cur"], m["prev"]
	rec.Version, _ = strconv.ParseInt(m["v"], 10, 64)
	if ms, _ := strconv.ParseInt(m["until"], 10, 64); ms > 0 {
		rec.PreviousUntil = time.UnixMilli(ms)
	}
	return rec, true
}

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
	err := storeCmd(ctx, rdb, prefix, targetID, rec).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("store webhook secret of target %d in redis: %w", targetID, err)
	}
	return nil
}

// StoreNewer writes each of recs (target id -> Record) that Redis holds
// an older version of, or none (no key, or a key without its current
// secret), and returns how many it wrote. It reads the stored versions in
// one pipeline and Stores only the records behind in a second: for a sync
// that mostly finds its records in place already, a read per record
// instead of a script run and a write. A record stored at the same
// version is left as it is (a version has one content: it grows with
// every rotation). rdb is a client, not a pipeline.
func StoreNewer(ctx context.Context, rdb redis.Cmdable, prefix string, recs map[uint64]Record) (int, error) {
	if len(recs) == 0 {
		return 0, nil
	}
	ids := make([]uint64, 0, len(recs))
	gets := make([]*redis.SliceCmd, 0, len(recs))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for id := range recs {
			ids = append(ids, id)
			gets = append(gets, p.HMGet(ctx, RedisKey(prefix, id), "v", "cur"))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("read the versions of %d webhook secrets in redis: %w", len(recs), err)
	}
	var behind []uint64
	for i, get := range gets {
		vals, err := get.Result()
		if err != nil {
			return 0, fmt.Errorf("read the version of the webhook secret of target %d in redis: %w", ids[i], err)
		}
		if storedVersion(vals) < recs[ids[i]].Version {
			behind = append(behind, ids[i])
		}
	}
	if len(behind) == 0 {
		return 0, nil
	}
	stores := make([]*redis.Cmd, 0, len(behind))
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range behind {
			stores = append(stores, storeCmd(ctx, p, prefix, id, recs[id]))
		}
		return nil
	})
	written := 0
	for _, c := range stores {
		n, cerr := c.Int()
		if cerr != nil {
			return written, fmt.Errorf("store %d webhook secrets in redis: %w", len(behind), cerr)
		}
		written += n
	}
	if err != nil {
		return written, fmt.Errorf("store %d webhook secrets in redis: %w", len(behind), err)
	}
	return written, nil
}

// storedVersion is the version of an HMGET v, cur reply: -1 when the key
// is missing, holds no current secret or a version that is not a number.
func storedVersion(vals []any) int64 {
	v, _ := vals[0].(string)
	cur, _ := vals[1].(string)
	n, err := strconv.ParseInt(v, 10, 64)
	if cur == "" || err != nil {
		return -1
	}
	return n
}

// storeCmd sends the store script for rec; its reply is 1 when it wrote.
func storeCmd(ctx context.Context, rdb redis.Scripter, prefix string, targetID uint64, rec Record) *redis.Cmd {
	until := int64(0)
	if !rec.PreviousUntil.IsZero() {
		until = rec.PreviousUntil.UnixMilli()
	}
	return storeScript.Eval(ctx, rdb, []string{RedisKey(prefix, targetID)},
		rec.Version, rec.Current, rec.Previous, until)
}

// Load reads target's Record; ok is false when Redis has none.
func Load(ctx context.Context, rdb redis.Cmdable, prefix string, targetID uint64) (rec Record, ok bool, err error) {
	m, err := rdb.HGetAll(ctx, RedisKey(prefix, targetID)).Result()
	if err != nil {
		return Record{}, false, fmt.Errorf("load webhook secret of target %d from redis: %w", targetID, err)
	}
	rec, ok = recordOf(m["cur"], m["prev"], m["until"])
	if ok {
		rec.Version, _ = strconv.ParseInt(m["v"], 10, 64)
	}
	return rec, ok, nil
}

// SigningCmd reads what signing with target's Record needs, without its
// Version (which Load reads too), for a caller that sends it itself, with
// other commands in one pipeline; SigningRecordOf reads its reply.
func SigningCmd(ctx context.Context, prefix string, targetID uint64) *redis.SliceCmd {
	return redis.NewSliceCmd(ctx, "hmget", RedisKey(prefix, targetID), "cur", "prev", "until")
}

// SigningRecordOf returns the Record (Version 0) in vals, the reply of
// SigningCmd; ok is false when Redis had none.
func SigningRecordOf(vals []any) (rec Record, ok bool) {
	var f [3]string
	for i := range min(len(vals), len(f)) {
		f[i], _ = vals[i].(string)
	}
	return recordOf(f[0], f[1], f[2])
}

// recordOf is the Record of the fields cur, prev and until (Version 0).
func recordOf(cur, prev, until string) (rec Record, ok bool) {
	if cur == "" {
		return Record{}, false
	}
	rec.Current, rec.Previous = cur, prev
	if ms, _ := strconv.ParseInt(until, 10, 64); ms > 0 {
		rec.PreviousUntil = time.UnixMilli(ms)
	}
	return rec, true
}

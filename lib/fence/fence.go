// Package fence owns the Redis format of target fences: what the scheduler
// writes when a target changes (PATCH, pause, resume, delete) and what the
// dispatcher checks before every provider call, so that an occurrence
// claimed under an older version of its target is never sent once the
// change is acknowledged.
//
// Keys, under the deployment's prefix (NOTIFLOW_REDIS_PREFIX):
//
//	<prefix>fence:<target id>          the target's fence: its version at its last change (a decimal)
//	<prefix>fence:synced               marker: every fence of MySQL is in Redis
//	<prefix>fence:syncing              token of the full copy in progress
//	<prefix>fence:inflight:<target id> sorted set of the sends in progress (member: the sender's
//	                                   token, score: when its registration expires, Redis clock, ms)
//
// A record whose target_version is below the target's fence is fenced.
// Without the marker (a new, flushed or restarted Redis whose copy is not
// complete yet) nothing can be judged and a sender must wait: fences fail
// closed. A sender registers itself in the in-flight set in the same atomic
// step as its check (Enter, or a script embedding CheckLua), and leaves it
// when the provider call returned (Exit), also before each wait between
// two attempts (a retry enters again, checking the fence anew, so no
// attempt starts after a fence unseen); the scheduler, after raising a
// fence, waits until the set holds no live member (Inflight) before it
// acknowledges the change. Times in the set are Redis's own clock (TIME),
// so no two hosts' clocks are compared.
package fence

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Key is the key of target's fence.
func Key(prefix string, targetID uint64) string {
	return prefix + "fence:" + strconv.FormatUint(targetID, 10)
}

// InflightKey is the key of target's set of sends in progress.
func InflightKey(prefix string, targetID uint64) string {
	return prefix + "fence:inflight:" + strconv.FormatUint(targetID, 10)
}

// SyncedKey is the marker of a complete copy of the fences.
func SyncedKey(prefix string) string { return prefix + "fence:synced" }

// SyncingKey holds the token of the full copy in progress.
func SyncingKey(prefix string) string { return prefix + "fence:syncing" }

// Answers of a check.
const (
	// Open: not fenced; the sender is registered in flight.
	Open = "open"
	// Fenced: the record's version is below the target's fence.
	Fenced = "fenced"
	// Unsynced: the marker is missing; nothing may be sent yet.
	Unsynced = "unsynced"
)

// CheckLua defines Lua functions for scripts that check a fence
// atomically with other work. fence_check(fkey, skey, version) answers
// 'unsynced' when skey (the marker) is missing, 'fenced' when the number at
// fkey is above version, else nil. fence_enter(ikey, member, ttl) adds
// member to the in-flight set ikey, live for ttl ms (Redis clock). A
// script calls fence_enter only after fence_check answered nil, in the
// same run.
//
// For a script that checks many records, the parts of those two:
// fence_synced(skey) (the marker is there), fence_above(fkey, version)
// (the fence stops version), fence_now() (Redis's clock, ms) and
// fence_register(ikey, member, ttl, now) (fence_enter at now, ttl a
// number), so that the marker and the clock are read once per script.
// fence_values(fkeys) reads the fences of a list of keys (at least one,
// at most a few thousand: they are unpacked onto Lua's stack) in two
// calls: their values, false where a target has no fence, or false
// instead of the list when a key holds something other than a fence
// (then each is read with fence_above, which fails on it);
// fence_stops(value, version) judges one of those values as fence_above
// does. Like fence_enter, fence_register may only follow, in the same
// run, a fence_synced that answered true and a fence_above of that record
// (or a fence_stops of its value from fence_values) that answered false.
const CheckLua = `
local function fence_synced(skey) return redis.call('EXISTS', skey) == 1 end
local function fence_stops(value, version)
  return tonumber(value or '0') > tonumber(version)
end
local function fence_above(fkey, version)
  return fence_stops(redis.call('GET', fkey), version)
end
local function fence_values(fkeys)
  local vals = redis.call('MGET', unpack(fkeys))
  local found = 0
  for i = 1, #fkeys do if vals[i] then found = found + 1 end end
  if redis.call('EXISTS', unpack(fkeys)) ~= found then return false end
  return vals
end
local function fence_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function fence_register(ikey, member, ttl, now)
  redis.call('ZADD', ikey, now + ttl, member)
  if redis.call('PTTL', ikey) < ttl then redis.call('PEXPIRE', ikey, ttl) end
end
local function fence_check(fkey, skey, version)
  if not fence_synced(skey) then return 'unsynced' end
  if fence_above(fkey, version) then return 'fenced' end
  return nil
end
local function fence_enter(ikey, member, ttl)
  fence_register(ikey, member, tonumber(ttl), fence_now())
end
`

var enterScript = redis.NewScript(CheckLua + `
local c = fence_check(KEYS[1], KEYS[2], ARGV[1])
if c then return c end
fence_enter(KEYS[3], ARGV[2], ARGV[3])
return 'open'
`)

// Enter checks the fence of target for a record of version and, when it
// is Open, registers member as a send in progress for ttl (at least 1 ms),
// in one atomic step. It answers Open, Fenced or Unsynced.
func Enter(ctx context.Context, rdb redis.Scripter, prefix string, targetID, version uint64, member string, ttlMS int64) (string, error) {
	v, err := enterScript.Run(ctx, rdb, []string{Key(prefix, targetID), SyncedKey(prefix), InflightKey(prefix, targetID)},
		version, member, max(ttlMS, 1)).Text()
	if err != nil {
		return "", fmt.Errorf("check the fence of target %d: %w", targetID, err)
	}
	return v, nil
}

var checkScript = redis.NewScript(CheckLua + `
return fence_check(KEYS[1], KEYS[2], ARGV[1]) or 'open'
`)

// Check checks the fence of target for a record of version without
// registering anything (for a record that will not be sent whatever the
// answer, to tell CANCELLED from FAILED). It answers Open, Fenced or
// Unsynced.
func Check(ctx context.Context, rdb redis.Scripter, prefix string, targetID, version uint64) (string, error) {
	v, err := checkScript.Run(ctx, rdb, []string{Key(prefix, targetID), SyncedKey(prefix)}, version).Text()
	if err != nil {
		return "", fmt.Errorf("check the fence of target %d: %w", targetID, err)
	}
	return v, nil
}

// Exit removes member from target's sends in progress.
func Exit(ctx context.Context, rdb redis.Cmdable, prefix string, targetID uint64, member string) error {
	if err := rdb.ZRem(ctx, InflightKey(prefix, targetID), member).Err(); err != nil {
		return fmt.Errorf("end the send of target %d: %w", targetID, err)
	}
	return nil
}

var raiseScript = redis.NewScript(`
local f = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > f then redis.call('SET', KEYS[1], ARGV[1]) end
return 1
`)

// Raise sets target's fence to version unless it is higher already. rdb
// may be a pipeline.
func Raise(ctx context.Context, rdb redis.Scripter, prefix string, targetID, version uint64) error {
	err := raiseScript.Eval(ctx, rdb, []string{Key(prefix, targetID)}, version).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("raise the fence of target %d: %w", targetID, err)
	}
	return nil
}

var inflightScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
`)

// Inflight returns how many sends of target are in progress (registered
// and not expired), dropping the expired ones.
func Inflight(ctx context.Context, rdb redis.Scripter, prefix string, targetID uint64) (int64, error) {
	n, err := inflightScript.Run(ctx, rdb, []string{InflightKey(prefix, targetID)}).Int64()
	if err != nil {
		return 0, fmt.Errorf("count the sends in progress of target %d: %w", targetID, err)
	}
	return n, nil
}

var finishScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], '1')
redis.call('DEL', KEYS[1])
return 1
`)

// BeginSync starts a full copy under token: the marker is set by
// FinishSync only if nothing removed the token meanwhile (a flush during
// the copy makes it start over).
func BeginSync(ctx context.Context, rdb redis.Cmdable, prefix, token string) error {
	if err := rdb.Set(ctx, SyncingKey(prefix), token, 0).Err(); err != nil {
		return fmt.Errorf("begin the copy of fences: %w", err)
	}
	return nil
}

// FinishSync sets the marker if token's copy is still the one in
// progress; ok is false when it is not (start over).
func FinishSync(ctx context.Context, rdb redis.Scripter, prefix, token string) (ok bool, err error) {
	n, err := finishScript.Run(ctx, rdb, []string{SyncingKey(prefix), SyncedKey(prefix)}, token).Int()
	if err != nil {
		return false, fmt.Errorf("finish the copy of fences: %w", err)
	}
	return n == 1, nil
}

// Synced reports whether the marker of a complete copy is there.
func Synced(ctx context.Context, rdb redis.Cmdable, prefix string) (bool, error) {
	n, err := rdb.Exists(ctx, SyncedKey(prefix)).Result()
	if err != nil {
		return false, fmt.Errorf("look up the fence marker: %w", err)
	}
	return n == 1, nil
}

// MarkSynced sets the marker of a complete copy without copying anything:
// for tests and tools that run dispatchers with no scheduler (no target
// was ever changed, so no fence exists). The scheduler never uses it.
func MarkSynced(ctx context.Context, rdb redis.Cmdable, prefix string) error {
	if err := rdb.Set(ctx, SyncedKey(prefix), "1", 0).Err(); err != nil {
		return fmt.Errorf("set the fence marker: %w", err)
	}
	return nil
}

var renewScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
for i, k in ipairs(KEYS) do
  if redis.call('ZADD', k, 'XX', 'CH', now + ttl, ARGV[i + 1]) == 1 then
    if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
  end
end
return 1
`)

// Renew extends the registrations of sends in progress (member -> target
// id) to ttl from now, in one step, and the life of their targets' sets
// with them; a registration already ended (Exit), or expired and dropped
// (by Inflight or with its set), is not brought back and does not extend
// its target's set. One expired but not yet dropped is renewed: no count
// has seen it gone.
func Renew(ctx context.Context, rdb redis.Scripter, prefix string, sends map[string]uint64, ttlMS int64) error {
	if len(sends) == 0 {
		return nil
	}
	keys := make([]string, 0, len(sends))
	args := make([]any, 0, len(sends)+1)
	args = append(args, max(ttlMS, 1))
	for member, target := range sends {
		keys = append(keys, InflightKey(prefix, target))
		args = append(args, member)
	}
	if err := renewScript.Run(ctx, rdb, keys, args...).Err(); err != nil {
		return fmt.Errorf("renew %d sends in progress: %w", len(sends), err)
	}
	return nil
}

package adapters

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/lib/fence"
	"github.com/notiflow/notiflow/lib/webhooksig"
	"github.com/notiflow/notiflow/services/dispatcher/internal/domain"
)

// fencedClaimsScript claims several notifications, each as claimScript
// does with its target's fence checked in the same atomic step
// (lib/fence), and answers an array: each claim's answer in order.
//
//	KEYS[1] the fences' marker
//	KEYS[2+4i..5+4i] claim i's (from 0) dedup key, rate-limit counter,
//	                 target's fence and target's in-flight set
//	ARGV[1..6] as claimScript's ARGV[2..7]
//	ARGV[7+2i] claim i's in-flight marker   ARGV[8+2i] its record's target version
//
// A claim answers as if it read its dedup key first: a done notification
// stays a duplicate, another worker's claim stays busy, whatever the
// fence. Else, when the fence stops the record, it answers "fenced" or
// "unsynced" without writing anything; otherwise it goes on as
// claimScript, and a claim also registers the in-flight marker in the
// target's in-flight set for the in-flight TTL, which the scheduler waits
// on before it acknowledges a change of the target. The claims run in
// order, so two claims of one notification in one call are judged as two
// calls would be. A claim that fails (a key of the wrong type, say)
// answers {"error", message} and stops neither the call nor the other
// claims; what it wrote before it failed stays, as a failed single
// script's writes would.
//
// What the script saves on Redis calls: the marker, the fences (two calls
// for all: lib/fence's fence_values) and the clock are read once per
// call; without a rate limit, a claim whose fence lets it through takes
// its dedup key with one SET NX, reading the key only when that finds it
// taken.
var fencedClaimsScript = redis.NewScript(fence.CheckLua + claimNewLua + `
local synced, now, fences
local ttl, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local n = (#KEYS - 1) / 4
local function stop(i)
  if synced == nil then synced = fence_synced(KEYS[1]) end
  if not synced then return 'unsynced' end
  if fences == nil then
    local fkeys = {}
    for j = 0, n - 1 do fkeys[j + 1] = KEYS[4 + 4 * j] end
    fences = fence_values(fkeys)
  end
  local stopped
  if fences then
    stopped = fence_stops(fences[i + 1], ARGV[8 + 2 * i])
  else
    stopped = fence_above(KEYS[4 + 4 * i], ARGV[8 + 2 * i])
  end
  if stopped then return 'fenced' end
  return nil
end
local function claim(i)
  local dkey, marker = KEYS[2 + 4 * i], ARGV[7 + 2 * i]
  local ok, s = pcall(stop, i)
  if not (ok and not s and limit <= 0 and redis.call('SET', dkey, marker, 'NX', 'PX', ARGV[1])) then
    local v = redis.call('GET', dkey)
    if v and v ~= marker then return v end -- the dedup key answers first, even before a fence that cannot be read
    if not ok then error(s, 0) end
    if s then return s end
    if not v then
      local r = claim_new(dkey, KEYS[3 + 4 * i], marker, ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
      if r then return r end
    end
  end
  if now == nil then now = fence_now() end
  fence_register(KEYS[5 + 4 * i], marker, ttl, now)
  return 'claimed'
end
local out = {}
for i = 0, n - 1 do
  local ok, a = pcall(claim, i)
  if not ok then
    if type(a) == 'table' then a = a.err end
    a = {'error', tostring(a)}
  end
  out[i + 1] = a
end
return out
`)

// SigningCache keeps the targets' webhook signing records for the sends
// (implemented by *Secrets): a webhook's claim reads the record of a
// target the cache Wants in the claim's pipeline, and Primes the cache
// with it.
type SigningCache interface {
	// Wants reports whether a record of target read now would be used,
	// and the time (the cache's clock, before the read) to Prime it with.
	Wants(target uint64) (at time.Time, want bool)
	// Prime caches target's record (ok false: Redis has none) as read
	// after at.
	Prime(target uint64, rec webhooksig.Record, ok bool, at time.Time)
}

// ClaimFenced is Claim with the fence of f's target checked in the same
// atomic step (see fencedClaimsScript): it may also answer Fenced (never
// send, record CANCELLED) or Unsynced (the fences' copy is incomplete:
// claim again later). A Claimed notification is registered as a send in
// progress of its target until ExitSend (or the in-flight TTL). Concurrent
// claims share one script call (Batcher.DoMerged). When signing is set
// (the record is a webhook, whose send needs its target's signing record
// next) and the Store's Signing cache Wants that record, the claim's
// pipeline also reads it, right after the script call, and the cache is
// primed with it whatever the claim answered (the read is as good
// either way): the send then does not wait for a round trip of its own.
// A read that failed, or that came with a claim that failed, primes
// nothing; the send reads the record itself.
func (s *Store) ClaimFenced(ctx context.Context, id, recipient, token string, f domain.FenceRef, signing bool, now time.Time) (domain.Claim, error) {
	c, retryAt := s.fencedClaim(id, recipient, token, f, now)
	var primeAt time.Time
	if signing && s.opt.Signing != nil {
		primeAt, c.signing = s.opt.Signing.Wants(f.TargetID)
	}
	err := s.reloadingScript(ctx, fencedClaimsScript, func() error {
		c.answer, c.err, c.recRead = "", nil, false
		if err := s.b.DoMerged(ctx, s.claims, c); err != nil {
			return err
		}
		return c.err
	})
	if err != nil {
		return domain.Claim{}, fmt.Errorf("claim notification %s: %w", id, err)
	}
	if c.recRead {
		s.opt.Signing.Prime(f.TargetID, c.rec, c.recOK, primeAt)
	}
	switch c.answer {
	case fence.Fenced:
		return domain.Claim{State: domain.Fenced}, nil
	case fence.Unsynced:
		return domain.Claim{State: domain.Unsynced}, nil
	}
	return s.claimAnswer(id, c.answer, retryAt)
}

// fencedClaim is one claim of ClaimFenced: the script's keys and
// arguments of it, and its answer (or error) once sent.
type fencedClaim struct {
	keys            [4]string // dedup key, rate-limit counter, fence, in-flight set
	marker, version string
	targetID        uint64
	signing         bool // read the target's signing record too
	answer          string
	err             error
	// The signing record, when recRead (recOK false: Redis has none).
	rec            webhooksig.Record
	recRead, recOK bool
}

// fencedClaim returns the claim of notification id (see ClaimFenced) and
// the start of the recipient's next rate-limit window.
func (s *Store) fencedClaim(id, recipient, token string, f domain.FenceRef, now time.Time) (*fencedClaim, time.Time) {
	window := max(s.opt.RateWindow.Milliseconds(), 1)
	n := now.UnixMilli() / window
	return &fencedClaim{
		keys: [4]string{s.dedupKey(id), s.opt.Prefix + "rl:" + recipient + ":" + strconv.FormatInt(n, 10),
			fence.Key(s.opt.Prefix, f.TargetID), fence.InflightKey(s.opt.Prefix, f.TargetID)},
		marker: domain.InflightMarker(token), version: strconv.FormatUint(f.Version, 10), targetID: f.TargetID,
	}, time.UnixMilli((n + 1) * window)
}

// fencedClaims merges a Store's concurrent fenced claims into calls of
// fencedClaimsScript (a Merger of *fencedClaim parts).
type fencedClaims struct{ s *Store }

var _ Merger = (*fencedClaims)(nil)

// Merge returns the script call of parts, then the read of the signing
// record of each part that asks for it.
func (m *fencedClaims) Merge(ctx context.Context, parts []any) []redis.Cmder {
	s := m.s
	a := make([]any, 0, 4+4*len(parts)+6+2*len(parts))
	a = append(a, "evalsha", fencedClaimsScript.Hash(), 1+4*len(parts), fence.SyncedKey(s.opt.Prefix))
	for _, p := range parts {
		c := p.(*fencedClaim)
		a = append(a, c.keys[0], c.keys[1], c.keys[2], c.keys[3])
	}
	a = append(a, s.inTTL, s.limit, s.window, s.doneTTL, domain.RateLimitedMarker, s.policy)
	for _, p := range parts {
		c := p.(*fencedClaim)
		a = append(a, c.marker, c.version)
	}
	cmds := []redis.Cmder{redis.NewSliceCmd(ctx, a...)}
	for _, p := range parts {
		if c := p.(*fencedClaim); c.signing {
			cmds = append(cmds, webhooksig.SigningCmd(ctx, s.opt.Prefix, c.targetID))
		}
	}
	return cmds
}

// Answer sets each part's answer from the script's array, or the
// command's error on every part, and the signing record of each part
// that read one (none when the read failed: the send reads it again).
func (m *fencedClaims) Answer(cmds []redis.Cmder, parts []any) {
	loads := cmds[1:]
	for _, p := range parts {
		if c := p.(*fencedClaim); c.signing && len(loads) > 0 {
			if vals, err := loads[0].(*redis.SliceCmd).Result(); err == nil {
				c.rec, c.recOK = webhooksig.SigningRecordOf(vals)
				c.recRead = true
			}
			loads = loads[1:]
		}
	}
	vals, err := cmds[0].(*redis.SliceCmd).Result()
	if err == nil && len(vals) != len(parts) {
		err = fmt.Errorf("the claim script answered %d claims of %d", len(vals), len(parts))
	}
	for i, p := range parts {
		c := p.(*fencedClaim)
		if err != nil {
			c.err = err
			continue
		}
		switch v := vals[i].(type) {
		case string:
			c.answer = v
		case []any:
			c.err = fmt.Errorf("claim script: %v", v)
			if len(v) == 2 {
				c.err = fmt.Errorf("claim script: %v", v[1])
			}
		default:
			c.err = fmt.Errorf("the claim script answered %T, want a string", vals[i])
		}
	}
}

// Recheck checks f's fence again for a send in progress under token (a
// webhook retry) and renews its in-flight registration: nil, or an error
// wrapping domain.ErrFenced, or another error when the fence cannot be
// judged (Redis failing, the fences' copy incomplete).
func (s *Store) Recheck(ctx context.Context, f domain.FenceRef, token string) error {
	v, err := fence.Enter(ctx, s.rdb, s.opt.Prefix, f.TargetID, f.Version, domain.InflightMarker(token), s.opt.InflightTTL.Milliseconds())
	switch {
	case err != nil:
		return err
	case v == fence.Fenced:
		return domain.ErrFenced
	case v == fence.Unsynced:
		return fmt.Errorf("check the fence of target %d: the copy of the fences in redis is incomplete", f.TargetID)
	}
	return nil
}

// Fenced reports whether f's record is below its target's fence, reading
// the fence only (nothing claimed or registered); an error when the fence
// cannot be judged (Redis failing, the fences' copy incomplete).
func (s *Store) Fenced(ctx context.Context, f domain.FenceRef) (bool, error) {
	v, err := fence.Check(ctx, s.rdb, s.opt.Prefix, f.TargetID, f.Version)
	switch {
	case err != nil:
		return false, err
	case v == fence.Unsynced:
		return false, fmt.Errorf("check the fence of target %d: the copy of the fences in redis is incomplete", f.TargetID)
	}
	return v == fence.Fenced, nil
}

// RenewSends extends the registrations of sends in progress (token ->
// target id) for another in-flight TTL.
func (s *Store) RenewSends(ctx context.Context, sends map[string]uint64) error {
	members := make(map[string]uint64, len(sends))
	for token, target := range sends {
		members[domain.InflightMarker(token)] = target
	}
	return fence.Renew(ctx, s.rdb, s.opt.Prefix, members, s.opt.InflightTTL.Milliseconds())
}

// ExitSend ends token's registration as a send in progress of target
// (after the provider call returned).
func (s *Store) ExitSend(ctx context.Context, targetID uint64, token string) error {
	cmd := redis.NewIntCmd(ctx, "zrem", fence.InflightKey(s.opt.Prefix, targetID), domain.InflightMarker(token))
	if err := s.b.Do(ctx, cmd); err != nil {
		return fmt.Errorf("end the send of target %d: %w", targetID, err)
	}
	if err := cmd.Err(); err != nil {
		return fmt.Errorf("end the send of target %d: %w", targetID, err)
	}
	return nil
}

package adapters

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/lib/fence"
	"github.com/notiflow/notiflow/lib/simsend"
	"github.com/notiflow/notiflow/services/dispatcher/internal/domain"
)

// claimScript deduplicates and rate-limits one notification atomically.
//
//	KEYS[1] dedup key    KEYS[2] rate-limit counter of the current window
//	ARGV[1] our in-flight marker   ARGV[2] in-flight TTL (ms)
//	ARGV[3] limit (0 = off)        ARGV[4] window (ms)
//	ARGV[5] done TTL (ms)          ARGV[6] rate-limited done marker
//	ARGV[7] policy over the limit: "defer" or "drop"
//
// It returns "claimed" (the marker is ours, new or already), "rate_limited"
// (drop: the notification is now remembered as rate limited), "deferred"
// (defer: nothing is written, the caller claims again in the next window),
// or the other marker found. Over the limit the counter is not raised.
var claimScript = redis.NewScript(claimNewLua + `
local v = redis.call('GET', KEYS[1])
if v then
  if v == ARGV[1] then return 'claimed' end
  return v
end
return claim_new(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]) or 'claimed'
`)

// claimNewLua defines claim_new(dkey, rkey, marker, inttl, limit, window,
// donettl, rlmarker, policy), the part of a claim of a notification nobody
// holds (the arguments as claimScript's KEYS and ARGV): it counts the
// recipient's window and answers "deferred" (policy defer) or, having
// stored the rate-limited marker, "rate_limited" when the window is full;
// else it stores the claim and answers nil.
const claimNewLua = `
local function claim_new(dkey, rkey, marker, inttl, limit, window, donettl, rlmarker, policy)
  limit = tonumber(limit)
  if limit > 0 then
    local n = redis.call('INCR', rkey)
    if n == 1 then redis.call('PEXPIRE', rkey, window) end
    if n > limit then
      redis.call('DECR', rkey)
      if policy == 'defer' then return 'deferred' end
      redis.call('SET', dkey, rlmarker, 'PX', donettl)
      return 'rate_limited'
    end
  end
  redis.call('SET', dkey, marker, 'PX', inttl)
  return nil
end
`

// ownerScript runs an action on the dedup key only while it holds our
// in-flight marker: ARGV[2] "extend" renews the TTL to ARGV[3] ms, "release"
// deletes the key. It returns 1 when the marker was ours.
var ownerScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == 'extend' then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
else
  redis.call('DEL', KEYS[1])
end
return 1
`)

// simSendsTTL is how long the per-run simulated-send counts are kept.
const simSendsTTL = 24 * time.Hour

// StoreOptions configure a Store.
type StoreOptions struct {
	// Prefix starts every key.
	Prefix string
	// InflightTTL is the life of a claim; DoneTTL of a done marker.
	InflightTTL, DoneTTL time.Duration
	// RateLimit per RateWindow per recipient; 0 is off.
	RateLimit  int
	RateWindow time.Duration
	// RatePolicy is what a claim over the limit does: domain.RateDefer
	// answers Deferred, anything else (domain.RateDrop) RateLimited.
	RatePolicy domain.RatePolicy
	// Signing, when set, gets the signing records webhook claims read
	// (see ClaimFenced).
	Signing SigningCache
}

// Store keeps the dispatcher's state in Redis: deduplication markers
// (<prefix>dedup:<notification id>), fixed-window rate-limit counters
// (<prefix>rl:<recipient>:<window number>, the window number being the
// claim time in Unix milliseconds / the window) and, for benchmarks, how often
// the simulated provider sent each occurrence (lib/simsend).
// Every command goes through the Batcher. Errors are Redis errors (the
// server is unreachable, a timeout, ...) unless they wrap
// domain.ErrBadMarker. It is safe for concurrent use.
type Store struct {
	rdb                           redis.UniversalClient
	b                             *Batcher
	opt                           StoreOptions
	inTTL, doneTTL, window, limit string
	policy                        string

	claims *fencedClaims

	mu         sync.Mutex
	simExpired map[string]time.Time // run id -> when its TTL was last set
}

// NewStore returns a Store using b for its commands and rdb for loading
// scripts and pinging.
func NewStore(rdb redis.UniversalClient, b *Batcher, opt StoreOptions) *Store {
	s := &Store{
		rdb: rdb, b: b, opt: opt,
		inTTL:      strconv.FormatInt(opt.InflightTTL.Milliseconds(), 10),
		doneTTL:    strconv.FormatInt(opt.DoneTTL.Milliseconds(), 10),
		window:     strconv.FormatInt(max(opt.RateWindow.Milliseconds(), 1), 10),
		limit:      strconv.Itoa(opt.RateLimit),
		policy:     string(opt.RatePolicy),
		simExpired: map[string]time.Time{},
	}
	s.claims = &fencedClaims{s: s}
	return s
}

func (s *Store) dedupKey(id string) string { return DedupKey(s.opt.Prefix, id) }

// DedupKey is the key of notification id's dedup claim or done marker
// under prefix (NOTIFLOW_REDIS_PREFIX): the one definition of its format.
func DedupKey(prefix, id string) string { return prefix + "dedup:" + id }

// Ping reports whether Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping redis: %w", err)
	}
	return nil
}

// evalsha runs script through the batcher; when Redis lost its script cache
// (a restart) it loads the script and tries once more.
func (s *Store) evalsha(ctx context.Context, script *redis.Script, keys []string, args ...any) (*redis.Cmd, error) {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, "evalsha", script.Hash(), len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	var cmd *redis.Cmd
	err := s.reloadingScript(ctx, script, func() error {
		cmd = redis.NewCmd(ctx, a...)
		if err := s.b.Do(ctx, cmd); err != nil {
			return err
		}
		return cmd.Err()
	})
	return cmd, err
}

// reloadingScript runs run, which calls script; when that fails because
// Redis lost its script cache (NOSCRIPT: a restart or a flush), it loads
// the script and runs run once more.
func (s *Store) reloadingScript(ctx context.Context, script *redis.Script, run func() error) error {
	err := run()
	if err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return err
	}
	if err := script.Load(ctx, s.rdb).Err(); err != nil {
		return fmt.Errorf("load redis script: %w", err)
	}
	return run()
}

// Claim tries to take notification id for sending under token, checking
// the recipient's rate limit at now in the same atomic step (a Lua script;
// without a rate limit a single SET NX GET). A Deferred claim's RetryAt is
// the start of the recipient's next window, on now's clock. It checks no
// fence (see ClaimFenced).
func (s *Store) Claim(ctx context.Context, id, recipient, token string, now time.Time) (domain.Claim, error) {
	marker := domain.InflightMarker(token)
	var v string
	var retryAt time.Time
	if s.opt.RateLimit > 0 {
		window := max(s.opt.RateWindow.Milliseconds(), 1)
		n := now.UnixMilli() / window
		retryAt = time.UnixMilli((n + 1) * window)
		rateKey := s.opt.Prefix + "rl:" + recipient + ":" + strconv.FormatInt(n, 10)
		cmd, err := s.evalsha(ctx, claimScript, []string{s.dedupKey(id), rateKey},
			marker, s.inTTL, s.limit, s.window, s.doneTTL, domain.RateLimitedMarker, s.policy)
		if err != nil {
			return domain.Claim{}, fmt.Errorf("claim notification %s: %w", id, err)
		}
		if v, err = cmd.Text(); err != nil {
			return domain.Claim{}, fmt.Errorf("claim notification %s: %w", id, err)
		}
	} else {
		// Without a rate limit the claim is one plain command, cheaper
		// for Redis than a script: set our marker unless the key exists,
		// and get what was there.
		cmd := redis.NewStringCmd(ctx, "set", s.dedupKey(id), marker, "nx", "get", "px", s.inTTL)
		if err := s.b.Do(ctx, cmd); err != nil {
			return domain.Claim{}, fmt.Errorf("claim notification %s: %w", id, err)
		}
		switch err := cmd.Err(); {
		case errors.Is(err, redis.Nil):
			return domain.Claim{State: domain.Claimed}, nil
		case err != nil:
			return domain.Claim{}, fmt.Errorf("claim notification %s: %w", id, err)
		}
		if v = cmd.Val(); v == marker {
			v = "claimed"
		}
	}
	return s.claimAnswer(id, v, retryAt)
}

// claimAnswer turns a claim script's answer v into a Claim.
func (s *Store) claimAnswer(id, v string, retryAt time.Time) (domain.Claim, error) {
	switch v {
	case "claimed":
		return domain.Claim{State: domain.Claimed}, nil
	case "rate_limited":
		return domain.Claim{State: domain.RateLimited}, nil
	case "deferred":
		return domain.Claim{State: domain.Deferred, RetryAt: retryAt}, nil
	}
	st, owner, prev, err := domain.ParseMarker(v)
	if err != nil {
		return domain.Claim{}, fmt.Errorf("claim notification %s: %w", id, err)
	}
	if st == domain.MarkerInflight {
		return domain.Claim{State: domain.Busy, Owner: owner}, nil
	}
	return domain.Claim{State: domain.Duplicate, Previous: prev}, nil
}

// MarkDone remembers the outcome of notification id for the done TTL.
func (s *Store) MarkDone(ctx context.Context, id string, o domain.Outcome) error {
	return s.StartMarkDone(ctx, id, o)(ctx)
}

// StartMarkDone queues the done marker of notification id and returns a
// function that waits until it is stored (or failed); call it exactly
// once. It lets the caller publish the result meanwhile.
func (s *Store) StartMarkDone(ctx context.Context, id string, o domain.Outcome) (wait func(context.Context) error) {
	return s.startMarkDone(ctx, id, o)
}

// StartMarkDoneExit is StartMarkDone that also ends token's registration
// as a send in progress of target, in the same pipeline. The wait reports
// the done marker only: a registration that could not be removed expires
// with the in-flight TTL.
func (s *Store) StartMarkDoneExit(ctx context.Context, id string, o domain.Outcome, targetID uint64, token string) (wait func(context.Context) error) {
	return s.startMarkDone(ctx, id, o,
		redis.NewIntCmd(ctx, "zrem", fence.InflightKey(s.opt.Prefix, targetID), domain.InflightMarker(token)))
}

// startMarkDone queues the done marker of notification id, and also in
// the same pipeline, whose outcome the wait does not report.
func (s *Store) startMarkDone(ctx context.Context, id string, o domain.Outcome, also ...redis.Cmder) (wait func(context.Context) error) {
	cmd := redis.NewStatusCmd(ctx, "set", s.dedupKey(id), domain.DoneMarker(o), "px", s.doneTTL)
	c, err := s.b.Start(ctx, append([]redis.Cmder{cmd}, also...)...)
	return func(ctx context.Context) error {
		if err == nil {
			err = s.b.Wait(ctx, c)
		}
		if err == nil {
			err = cmd.Err()
		}
		if err != nil {
			return fmt.Errorf("mark notification %s done: %w", id, err)
		}
		return nil
	}
}

// ExtendMany renews the claims of several notifications (id -> token) in
// one round trip. It returns how many were no longer held.
func (s *Store) ExtendMany(ctx context.Context, claims map[string]string) (lost int, err error) {
	for try := 0; ; try++ {
		cmds := make([]*redis.Cmd, 0, len(claims))
		cmders := make([]redis.Cmder, 0, len(claims))
		for id, token := range claims {
			c := redis.NewCmd(ctx, "evalsha", ownerScript.Hash(), 1, s.dedupKey(id), domain.InflightMarker(token), "extend", s.inTTL)
			cmds, cmders = append(cmds, c), append(cmders, c)
		}
		if err := s.b.Do(ctx, cmders...); err != nil {
			return 0, fmt.Errorf("extend %d claims: %w", len(claims), err)
		}
		lost, noScript := 0, false
		for _, c := range cmds {
			switch err := c.Err(); {
			case err != nil && redis.HasErrorPrefix(err, "NOSCRIPT"):
				noScript = true
			case err != nil:
				return 0, fmt.Errorf("extend %d claims: %w", len(claims), err)
			default:
				if n, _ := c.Int(); n != 1 {
					lost++
				}
			}
		}
		if !noScript || try > 0 {
			if noScript {
				return 0, fmt.Errorf("extend %d claims: script missing after loading it", len(claims))
			}
			return lost, nil
		}
		if err := ownerScript.Load(ctx, s.rdb).Err(); err != nil {
			return 0, fmt.Errorf("load redis script: %w", err)
		}
	}
}

// Release gives up token's claim on notification id (if it still holds
// it), so that the next delivery of the record is judged afresh.
func (s *Store) Release(ctx context.Context, id, token string) error {
	if _, err := s.evalsha(ctx, ownerScript, []string{s.dedupKey(id)}, domain.InflightMarker(token), "release"); err != nil {
		return fmt.Errorf("release notification %s: %w", id, err)
	}
	return nil
}

// Extend renews token's claim on notification id for another in-flight
// TTL. It returns domain.ErrClaimLost when the claim expired or was taken over.
func (s *Store) Extend(ctx context.Context, id, token string) error {
	cmd, err := s.evalsha(ctx, ownerScript, []string{s.dedupKey(id)}, domain.InflightMarker(token), "extend", s.inTTL)
	if err != nil {
		return fmt.Errorf("extend claim on notification %s: %w", id, err)
	}
	if n, _ := cmd.Int(); n != 1 {
		return fmt.Errorf("extend claim on notification %s: %w", id, domain.ErrClaimLost)
	}
	return nil
}

// RecordSimSend counts one simulated send of occurrence field
// (simsend.Field) in run runID's hash (simsend.Key), for the benchmark's
// independent duplicate count.
func (s *Store) RecordSimSend(ctx context.Context, runID, field string) error {
	key := simsend.Key(s.opt.Prefix, runID)
	cmds := []redis.Cmder{redis.NewIntCmd(ctx, "hincrby", key, field, 1)}
	if s.needsExpire(runID) {
		cmds = append(cmds, redis.NewBoolCmd(ctx, "expire", key, int64(simSendsTTL/time.Second)))
	}
	if err := s.b.Do(ctx, cmds...); err != nil {
		return fmt.Errorf("record simulated send: %w", err)
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			s.mu.Lock()
			delete(s.simExpired, runID)
			s.mu.Unlock()
			return fmt.Errorf("record simulated send: %w", err)
		}
	}
	return nil
}

// needsExpire says whether the run's counter hash needs its TTL (re)set:
// once per run and hour in this process, not on every send.
func (s *Store) needsExpire(runID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if t, ok := s.simExpired[runID]; ok && now.Sub(t) < time.Hour {
		return false
	}
	if len(s.simExpired) > 1024 {
		clear(s.simExpired)
	}
	s.simExpired[runID] = now
	return true
}

package adapters

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/lib/webhooksig"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

// ErrSecretMissing: the notification's target has its own signing secret
// but Redis has none for it (yet); the webhook is not sent unsigned.
var ErrSecretMissing = errors.New("webhook signing secret of the target is missing in redis")

// maxCachedSecrets bounds the cache; when it is full it is emptied.
const maxCachedSecrets = 100_000

// SecretsOptions configure Secrets.
type SecretsOptions struct {
	// Prefix starts the Redis keys (webhooksig.RedisKey).
	Prefix string
	// Global are the secrets (whsec_...) signing the webhooks of targets
	// without their own; a target's own secret always wins.
	Global []string
	// CacheTTL is how long a target's record (or its absence) read from
	// Redis is reused; 0 reads Redis on every attempt.
	CacheTTL time.Duration
	// Now is the clock (tests); time.Now by default.
	Now func() time.Time
}

// CommandRunner sends Redis commands and returns once their replies are
// in, each command carrying its own outcome (the Batcher, which shares
// its pipelines between callers).
type CommandRunner interface {
	Do(ctx context.Context, cmds ...redis.Cmder) error
}

// Secrets gives the keys a webhook is signed with: those of the target's
// own Record in Redis (kept by the scheduler), else the global ones. A
// record is read through a CommandRunner, so concurrent sends share
// round trips, or brought by a webhook's claim (Prime), and cached for
// CacheTTL from its read, so a rotation reaches the dispatcher within
// CacheTTL; the end of a grace period is applied at once, since the
// cached record carries it. It is safe for concurrent use.
type Secrets struct {
	redis  CommandRunner
	opt    SecretsOptions
	global [][]byte

	mu    sync.Mutex
	cache map[uint64]cachedRecord
}

type cachedRecord struct {
	rec     webhooksig.Record
	ok      bool
	fetched time.Time
}

// NewSecrets returns Secrets reading Redis through r; it fails when a
// global secret is not a valid whsec_ secret (the error does not contain
// it).
func NewSecrets(r CommandRunner, opt SecretsOptions) (*Secrets, error) {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	s := &Secrets{redis: r, opt: opt, cache: map[uint64]cachedRecord{}}
	for i, g := range opt.Global {
		key, err := webhooksig.Decode(g)
		if err != nil {
			return nil, fmt.Errorf("global webhook secret #%d: %w", i+1, err)
		}
		s.global = append(s.global, key)
	}
	return s, nil
}

// Keys returns the keys to sign due's webhook with at this moment: the
// target's own (current, plus the previous one during a rotation's grace
// period) when Redis has them, else the global ones (none: the webhook
// goes unsigned). When due.WebhookSecretRequired is set and the target's
// record is missing, it returns ErrSecretMissing; a Redis failure is
// returned as an error too. Either way the caller must not send yet.
func (s *Secrets) Keys(ctx context.Context, due *notiflowv1.NotificationDue) ([][]byte, error) {
	now := s.opt.Now()
	rec, ok, err := s.record(ctx, due.TargetId, now)
	if err != nil {
		return nil, err
	}
	if !ok {
		if due.WebhookSecretRequired {
			return nil, fmt.Errorf("target %d: %w", due.TargetId, ErrSecretMissing)
		}
		return s.global, nil
	}
	valid := rec.Valid(now)
	keys := make([][]byte, 0, len(valid))
	for _, v := range valid {
		key, err := webhooksig.Decode(v)
		if err != nil {
			return nil, fmt.Errorf("webhook secret of target %d in redis: %w", due.TargetId, err)
		}
		keys = append(keys, key)
	}
	return keys, nil
}

func (s *Secrets) record(ctx context.Context, target uint64, now time.Time) (webhooksig.Record, bool, error) {
	s.mu.Lock()
	c, hit := s.cache[target]
	s.mu.Unlock()
	if hit && now.Sub(c.fetched) < s.opt.CacheTTL {
		return c.rec, c.ok, nil
	}
	cmd := webhooksig.SigningCmd(ctx, s.opt.Prefix, target)
	err := s.redis.Do(ctx, cmd)
	if err == nil {
		err = cmd.Err()
	}
	if err != nil {
		return webhooksig.Record{}, false, fmt.Errorf("load webhook secret of target %d from redis: %w", target, err)
	}
	rec, ok := webhooksig.SigningRecordOf(cmd.Val())
	s.Prime(target, rec, ok, now)
	return rec, ok, nil
}

// Wants reports whether a record of target read now would be used (the
// cache has none for it, or one read half CacheTTL ago or longer; never
// without a cache), and the time by Secrets' clock to Prime it with: a
// time taken before the read, so that the cache never takes the record
// for younger than it is.
func (s *Secrets) Wants(target uint64) (at time.Time, want bool) {
	if s.opt.CacheTTL <= 0 {
		return time.Time{}, false
	}
	now := s.opt.Now()
	s.mu.Lock()
	c, hit := s.cache[target]
	s.mu.Unlock()
	return now, !hit || now.Sub(c.fetched) >= s.opt.CacheTTL/2
}

// Prime caches target's record (ok false: Redis had none), read from
// Redis after at (by Secrets' clock: see Wants), for CacheTTL from at,
// unless the cache holds one stamped later; Keys then uses it without
// reading Redis. The caller read it itself, in a round trip it made
// anyway (a claim). Without a cache (CacheTTL 0) it does nothing.
func (s *Secrets) Prime(target uint64, rec webhooksig.Record, ok bool, at time.Time) {
	if s.opt.CacheTTL <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, hit := s.cache[target]
	if hit && c.fetched.After(at) {
		return
	}
	if !hit && len(s.cache) >= maxCachedSecrets {
		clear(s.cache)
	}
	s.cache[target] = cachedRecord{rec: rec, ok: ok, fetched: at}
}

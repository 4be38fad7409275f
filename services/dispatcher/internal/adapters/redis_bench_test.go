package adapters

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/fence"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/lib/webhooksig"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/dispatcher/internal/domain"
)

// BenchmarkRedisCost measures what the dispatcher's Redis commands for one
// notification cost the Redis server and the dispatcher, against the
// test Redis, which must run on this machine (`make deps`): 512 senders
// at once (a replica's workers, NOTIFLOW_WORKERS; REDIS_COST_SENDERS sets
// another number, and with it how full the pipelines are) through the
// Batcher at the service's defaults (256 commands a pipeline, 2
// pipelines in flight, a 2 s timeout), every notification a new id of a
// new target, as in a fan-out. Cases:
//
//   - claim: Store.Claim without a rate limit, one SET NX GET: the claim
//     without a fence, the baseline (the service always checks fences);
//   - claim-fenced: Store.ClaimFenced, the claim script with the target's
//     fence checked and the send registered as in progress of its target,
//     the claims queued for one pipeline merged into calls of up to
//     mergeMax (cmds/pipeline counts such a call as one);
//   - claim-fenced-unmerged: the same script called once per claim
//     through the batcher, the baseline of the merging;
//   - claim-fenced-done: that, then StartMarkDoneExit (the done marker and
//     the end of the registration, in one pipeline): the Redis work of a
//     notification in `make bench` but the sim channel's count of sends;
//   - claim-fenced-keys: a webhook's claim and signing keys with the
//     record read by the send: claim-fenced, then Secrets.Keys reading
//     the target's record (HMGET) in a round trip of its own (every
//     target has its own record, as every API target does);
//   - claim-fenced-signing: the same as the service does it: ClaimFenced
//     with signing, which reads the record in the claim's pipeline into
//     the Secrets' cache, then Secrets.Keys from that cache.
//
// Every run uses keys of its own, which expire only after it and are
// removed once it is measured. Reported: redis_cpu_us/op (the server's
// CPU from /proc), client_cpu_us/op (this process's) and cmds/pipeline
// (the commands the batcher's pipelines carried on average).
//
//	go test -run '^$' -bench RedisCost -benchtime 100000x -count 3 ./internal/adapters/
func BenchmarkRedisCost(b *testing.B) {
	rdb, prefix := testkit.Redis(b)
	ctx := context.Background()
	pid, err := testkit.LocalRedisServer(ctx, rdb)
	if err != nil {
		b.Fatalf("the test Redis's CPU cannot be measured (start it on this machine with make deps): %v", err)
	}
	senders := 512
	if v := os.Getenv("REDIS_COST_SENDERS"); v != "" {
		if senders, err = strconv.Atoi(v); err != nil || senders < 1 {
			b.Fatalf("REDIS_COST_SENDERS=%q: want a number of senders, at least 1", v)
		}
	}
	var size pipelineSizes
	batcher := NewBatcher(rdb, 256, 2, 2*time.Second, &size)
	testkit.Go(b, batcher.Run)
	var seq atomic.Uint64 // ids and targets, new for every operation of every run
	done := domain.Outcome{Status: notiflowv1.Status_STATUS_DELIVERED, Attempts: 1, ProviderCode: 200}
	claim := func(s *Store, id, token string, _ uint64) error {
		c, err := s.Claim(ctx, id, "rcp", token, time.Now())
		if err == nil && c.State != domain.Claimed {
			err = fmt.Errorf("claim of %s: state %d, want Claimed", id, c.State)
		}
		return err
	}
	claimSigning := func(s *Store, id, token string, target uint64, signing bool) error {
		c, err := s.ClaimFenced(ctx, id, "rcp", token, domain.FenceRef{TargetID: target, Version: 1}, signing, time.Now())
		if err == nil && c.State != domain.Claimed {
			err = fmt.Errorf("claim of %s: state %d, want Claimed", id, c.State)
		}
		return err
	}
	claimFenced := func(s *Store, id, token string, target uint64) error {
		return claimSigning(s, id, token, target, false)
	}
	claimKeys := func(s *Store, id, token string, target uint64, signing bool) error {
		if err := claimSigning(s, id, token, target, signing); err != nil {
			return err
		}
		keys, err := s.opt.Signing.(*Secrets).Keys(ctx, &notiflowv1.NotificationDue{TargetId: target, WebhookSecretRequired: true})
		if err == nil && len(keys) != 1 {
			err = fmt.Errorf("keys of target %d: %d, want 1", target, len(keys))
		}
		return err
	}
	ops := map[string]func(s *Store, id, token string, target uint64) error{
		"claim":        claim,
		"claim-fenced": claimFenced,
		"claim-fenced-unmerged": func(s *Store, id, token string, target uint64) error {
			c, _ := s.fencedClaim(id, "rcp", token, domain.FenceRef{TargetID: target, Version: 1}, time.Now())
			parts := []any{c}
			cmds := s.claims.Merge(ctx, parts)
			if err := batcher.Do(ctx, cmds...); err != nil {
				return err
			}
			s.claims.Answer(cmds, parts)
			if c.err == nil && c.answer != "claimed" {
				c.err = fmt.Errorf("claim of %s: %q, want claimed", id, c.answer)
			}
			return c.err
		},
		"claim-fenced-done": func(s *Store, id, token string, target uint64) error {
			if err := claimFenced(s, id, token, target); err != nil {
				return err
			}
			return s.StartMarkDoneExit(ctx, id, done, target, token)(ctx)
		},
		"claim-fenced-keys": func(s *Store, id, token string, target uint64) error {
			return claimKeys(s, id, token, target, false)
		},
		"claim-fenced-signing": func(s *Store, id, token string, target uint64) error {
			return claimKeys(s, id, token, target, true)
		},
	}
	secret, err := webhooksig.Generate()
	if err != nil {
		b.Fatal(err)
	}
	if err := fencedClaimsScript.Load(ctx, rdb).Err(); err != nil {
		b.Fatal(err)
	}
	signs := map[string]bool{"claim-fenced-keys": true, "claim-fenced-signing": true}
	for _, name := range []string{"claim", "claim-fenced", "claim-fenced-unmerged", "claim-fenced-done", "claim-fenced-keys", "claim-fenced-signing"} {
		b.Run(name, func(b *testing.B) {
			op := ops[name]
			// Each run has keys of its own, none expiring while it runs
			// (Redis would expire them on its own time, in a later run),
			// and removes them after it is measured.
			runPrefix := prefix + strconv.FormatUint(seq.Add(1), 10) + ":"
			secrets, err := NewSecrets(batcher, SecretsOptions{Prefix: runPrefix, CacheTTL: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			s := NewStore(rdb, batcher, StoreOptions{Prefix: runPrefix, InflightTTL: time.Hour, DoneTTL: time.Hour, Signing: secrets})
			if err := fence.MarkSynced(ctx, rdb, runPrefix); err != nil {
				b.Fatal(err)
			}
			defer func() {
				if _, err := testkit.UnlinkPrefix(ctx, rdb, runPrefix); err != nil {
					b.Fatal(err)
				}
			}()
			// Targets are numbered from 1 in each run (its keys are its
			// own): in the signing cases every one of them gets its
			// signing record first.
			for first := 1; signs[name] && first <= b.N; first += 1000 {
				recs := map[uint64]webhooksig.Record{}
				for t := first; t < first+1000 && t <= b.N; t++ {
					recs[uint64(t)] = webhooksig.Record{Version: 1, Current: secret}
				}
				if _, err := webhooksig.StoreNewer(ctx, rdb, runPrefix, recs); err != nil {
					b.Fatal(err)
				}
			}
			size.reset()
			var next atomic.Int64
			var wg sync.WaitGroup
			r0, c0 := testkit.ProcessCPUSeconds(pid), testkit.ProcessCPUSeconds(os.Getpid())
			b.ResetTimer()
			for range senders {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						id := "n" + strconv.FormatInt(i, 10)
						if err := op(s, id, "tok-"+id, uint64(i)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			r1, c1 := testkit.ProcessCPUSeconds(pid), testkit.ProcessCPUSeconds(os.Getpid())
			b.ReportMetric((r1-r0)*1e6/float64(b.N), "redis_cpu_us/op")
			b.ReportMetric((c1-c0)*1e6/float64(b.N), "client_cpu_us/op")
			b.ReportMetric(size.mean(), "cmds/pipeline")
		})
	}
}

// pipelineSizes observes the batcher's pipelines: how many commands each
// carried on average.
type pipelineSizes struct{ cmds, pipelines atomic.Int64 }

func (p *pipelineSizes) Observe(v float64) { p.cmds.Add(int64(v)); p.pipelines.Add(1) }

func (p *pipelineSizes) reset() { p.cmds.Store(0); p.pipelines.Store(0) }

func (p *pipelineSizes) mean() float64 {
	if n := p.pipelines.Load(); n > 0 {
		return float64(p.cmds.Load()) / float64(n)
	}
	return 0
}

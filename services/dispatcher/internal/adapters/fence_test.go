package adapters

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/lib/fence"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/dispatcher/internal/domain"
)

// TestClaimFenced: without the fences' marker nothing is claimed
// (Unsynced); a record below its target's fence is Fenced and leaves no
// claim, counter or registration; one at the fence is claimed and
// registered as a send in progress of its target until ExitSend; a done
// notification stays a duplicate whatever the fence; Recheck sees a fence
// raised during the send.
func TestClaimFenced(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{0, 5} {
		s, rdb, _ := testStore(t, StoreOptions{RateLimit: limit, RateWindow: time.Minute, RatePolicy: domain.RateDrop})
		ctx := context.Background()
		now := time.Now()
		p := s.opt.Prefix
		ref := domain.FenceRef{TargetID: 7, Version: 2}
		claim := func(id, token string, f domain.FenceRef) domain.ClaimState {
			t.Helper()
			c, err := s.ClaimFenced(ctx, id, "rcp", token, f, false, now)
			if err != nil {
				t.Fatalf("ClaimFenced(%s): %v", id, err)
			}
			return c.State
		}
		inflight := func() int64 {
			t.Helper()
			n, err := fence.Inflight(ctx, rdb, p, 7)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		if st := claim("n1", "t1", ref); st != domain.Unsynced {
			t.Fatalf("limit %d: no marker: state %d, want Unsynced", limit, st)
		}
		if n := rdb.Exists(ctx, s.dedupKey("n1")).Val(); n != 0 {
			t.Fatalf("limit %d: an unsynced claim wrote the dedup key", limit)
		}
		if err := fence.MarkSynced(ctx, rdb, p); err != nil {
			t.Fatal(err)
		}
		if st := claim("n1", "t1", ref); st != domain.Claimed || inflight() != 1 {
			t.Fatalf("limit %d: no fence: state %d, %d in flight, want Claimed and 1", limit, st, inflight())
		}
		if err := s.ExitSend(ctx, 7, "t1"); err != nil || inflight() != 0 {
			t.Fatalf("limit %d: ExitSend: %v, %d in flight", limit, err, inflight())
		}
		if err := s.MarkDone(ctx, "n1", domain.Outcome{Status: 1, Attempts: 1}); err != nil {
			t.Fatal(err)
		}
		if err := fence.Raise(ctx, rdb, p, 7, 3); err != nil {
			t.Fatal(err)
		}
		if st := claim("n1", "t2", ref); st != domain.Duplicate {
			t.Fatalf("limit %d: a done notification under a fence: state %d, want Duplicate", limit, st)
		}
		if st := claim("n2", "t3", ref); st != domain.Fenced {
			t.Fatalf("limit %d: version 2 under fence 3: state %d, want Fenced", limit, st)
		}
		if rdb.Exists(ctx, s.dedupKey("n2")).Val() != 0 || inflight() != 0 {
			t.Fatalf("limit %d: a fenced claim left a claim or a registration", limit)
		}
		if limit > 0 {
			keys := rdb.Keys(ctx, p+"rl:*").Val()
			if len(keys) != 1 {
				t.Fatalf("rate-limit counters: %v, want one", keys)
			}
			if n, _ := rdb.Get(ctx, keys[0]).Int(); n != 1 {
				t.Fatalf("the fenced claim was counted against the rate limit: %d, want 1", n)
			}
		}
		cur := domain.FenceRef{TargetID: 7, Version: 3}
		if st := claim("n3", "t4", cur); st != domain.Claimed {
			t.Fatalf("limit %d: version 3 under fence 3: state %d, want Claimed", limit, st)
		}
		if err := s.Recheck(ctx, cur, "t4"); err != nil {
			t.Fatalf("limit %d: Recheck at the fence: %v", limit, err)
		}
		if err := fence.Raise(ctx, rdb, p, 7, 4); err != nil {
			t.Fatal(err)
		}
		if err := s.Recheck(ctx, cur, "t4"); !errors.Is(err, domain.ErrFenced) {
			t.Fatalf("limit %d: Recheck after the fence rose: %v, want ErrFenced", limit, err)
		}
		// A lower fence never replaces a higher one.
		if err := fence.Raise(ctx, rdb, p, 7, 1); err != nil {
			t.Fatal(err)
		}
		if v, _ := rdb.Get(ctx, fence.Key(p, 7)).Int(); v != 4 {
			t.Fatalf("limit %d: fence lowered to %d", limit, v)
		}
		if err := rdb.Del(ctx, fence.SyncedKey(p)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Recheck(ctx, domain.FenceRef{TargetID: 8, Version: 1}, "t5"); err == nil || errors.Is(err, domain.ErrFenced) {
			t.Fatalf("limit %d: Recheck without the marker: %v, want an error that is not ErrFenced", limit, err)
		}
	}
}

// TestInflightExpires: a registration that is never ended stops counting
// once its TTL passes (Redis clock).
func TestInflightExpires(t *testing.T) {
	t.Parallel()
	s, rdb, _ := testStore(t, StoreOptions{InflightTTL: 300 * time.Millisecond})
	ctx := context.Background()
	if err := fence.MarkSynced(ctx, rdb, s.opt.Prefix); err != nil {
		t.Fatal(err)
	}
	if c, err := s.ClaimFenced(ctx, "n1", "rcp", "t1", domain.FenceRef{TargetID: 9, Version: 1}, false, time.Now()); err != nil || c.State != domain.Claimed {
		t.Fatalf("claim: %+v %v", c, err)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		n, err := fence.Inflight(ctx, rdb, s.opt.Prefix, 9)
		if err != nil || n != 0 {
			return fmt.Errorf("%d in flight (%v)", n, err)
		}
		return nil
	})
}

// claimTwoEndOne marks the fences synced, claims notifications "a" and
// "b" of target as sends "t-a" and "t-b", and ends "t-b".
func claimTwoEndOne(t *testing.T, s *Store, rdb *redis.Client, target uint64) {
	t.Helper()
	ctx := context.Background()
	if err := fence.MarkSynced(ctx, rdb, s.opt.Prefix); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if c, err := s.ClaimFenced(ctx, id, "rcp", "t-"+id, domain.FenceRef{TargetID: target, Version: 1}, false, time.Now()); err != nil || c.State != domain.Claimed {
			t.Fatalf("claim %s: %+v %v", id, c, err)
		}
	}
	if err := s.ExitSend(ctx, target, "t-b"); err != nil {
		t.Fatal(err)
	}
}

// TestRenewSends: a renewed registration outlives its first TTL; one
// ended by ExitSend is not brought back by a renewal.
func TestRenewSends(t *testing.T) {
	t.Parallel()
	// A TTL well above the renewal period: under -race on two busy
	// cores one renewal round trip can take a few hundred milliseconds.
	const ttl = time.Second
	s, rdb, _ := testStore(t, StoreOptions{InflightTTL: ttl})
	ctx := context.Background()
	p := s.opt.Prefix
	claimTwoEndOne(t, s, rdb, 11)
	// Renew t-a (and the ended t-b) every 100 ms for more than three TTLs.
	end := time.Now().Add(3*ttl + ttl/2)
	for time.Now().Before(end) {
		if err := s.RenewSends(ctx, map[string]uint64{"t-a": 11, "t-b": 11}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the keeper's period
	}
	n, err := fence.Inflight(ctx, rdb, p, 11)
	if err != nil || n != 1 {
		t.Fatalf("after renewals: %d in flight (%v), want 1 (t-a renewed, t-b ended)", n, err)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if n, err := fence.Inflight(ctx, rdb, p, 11); err != nil || n != 0 {
			return fmt.Errorf("%d in flight (%v)", n, err)
		}
		return nil
	})
}

// TestRenewEndedSendKeepsNothingAlive: renewing a send that has ended
// leaves its target's set (still holding another send) to its own expiry;
// renewing the live send extends it.
func TestRenewEndedSendKeepsNothingAlive(t *testing.T) {
	t.Parallel()
	const ttl = 5 * time.Second
	s, rdb, _ := testStore(t, StoreOptions{InflightTTL: ttl})
	ctx := context.Background()
	p := s.opt.Prefix
	claimTwoEndOne(t, s, rdb, 12)
	key := fence.InflightKey(p, 12)
	const aged = ttl - 500*time.Millisecond
	pttl := func() (time.Duration, error) {
		left, err := rdb.PTTL(ctx, key).Result()
		if err == nil && left <= 0 {
			err = fmt.Errorf("the set has no expiry or is gone (PTTL %s)", left)
		}
		return left, err
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		left, err := pttl()
		if err == nil && left > aged {
			err = fmt.Errorf("the set has %s to live", left)
		}
		return err
	})
	if err := s.RenewSends(ctx, map[string]uint64{"t-b": 12}); err != nil {
		t.Fatal(err)
	}
	if left, err := pttl(); err != nil || left > aged {
		t.Errorf("after renewing the ended send the set has %s to live (%v), want at most %s", left, err, aged)
	}
	if err := s.RenewSends(ctx, map[string]uint64{"t-a": 12}); err != nil {
		t.Fatal(err)
	}
	if left, err := pttl(); err != nil || left <= aged {
		t.Errorf("after renewing the live send the set has %s to live (%v), want more than %s", left, err, aged)
	}
}

// Fenced reads a fence without claiming or registering anything: an error
// without the marker, false for a record at or above the fence (or of a
// target without one), true below it.
func TestFencedReadsOnly(t *testing.T) {
	t.Parallel()
	s, rdb, _ := testStore(t, StoreOptions{})
	ctx := context.Background()
	p := s.opt.Prefix
	if _, err := s.Fenced(ctx, domain.FenceRef{TargetID: 21, Version: 1}); err == nil {
		t.Fatal("no marker: Fenced judged the record, want an error")
	}
	if err := fence.MarkSynced(ctx, rdb, p); err != nil {
		t.Fatal(err)
	}
	if err := fence.Raise(ctx, rdb, p, 21, 3); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ref  domain.FenceRef
		want bool
	}{{domain.FenceRef{TargetID: 21, Version: 2}, true}, {domain.FenceRef{TargetID: 21, Version: 3}, false}, {domain.FenceRef{TargetID: 22, Version: 0}, false}} {
		got, err := s.Fenced(ctx, c.ref)
		if err != nil || got != c.want {
			t.Errorf("%+v: fenced %v (%v), want %v", c.ref, got, err, c.want)
		}
	}
	if n, err := fence.Inflight(ctx, rdb, p, 21); err != nil || n != 0 {
		t.Errorf("%d send(s) registered after Fenced (%v), want none", n, err)
	}
}

package adapters

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/lib/fence"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/lib/webhooksig"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/dispatcher/internal/domain"
)

// mgetMerger merges parts (*mgetPart) into one MGET; its first Merge
// waits for gate, which lets a test queue calls behind it.
type mgetMerger struct {
	entered, gate chan struct{}
	once          sync.Once
	mu            sync.Mutex
	sizes         []int // parts of each Merge
}

type mgetPart struct {
	key, val string
	err      error
}

func (m *mgetMerger) Merge(ctx context.Context, parts []any) []redis.Cmder {
	m.once.Do(func() {
		close(m.entered)
		<-m.gate
	})
	m.mu.Lock()
	m.sizes = append(m.sizes, len(parts))
	m.mu.Unlock()
	args := []any{"mget"}
	for _, p := range parts {
		args = append(args, p.(*mgetPart).key)
	}
	return []redis.Cmder{redis.NewSliceCmd(ctx, args...)}
}

func (m *mgetMerger) Answer(cmds []redis.Cmder, parts []any) {
	vals, err := cmds[0].(*redis.SliceCmd).Result()
	for i, p := range parts {
		mp := p.(*mgetPart)
		if err != nil {
			mp.err = err
			continue
		}
		mp.val, _ = vals[i].(string)
	}
}

// TestBatcherMergesParts: the parts queued while a pipeline is in flight
// go out in the next one as merged commands of at most mergeMax parts,
// beside the plain commands queued with them, and each part and command
// gets its own answer.
func TestBatcherMergesParts(t *testing.T) {
	t.Parallel()
	rdb, prefix := testkit.Redis(t)
	ctx := context.Background()
	size := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "size", Buckets: []float64{1, 2, 3, 4, 8}})
	b := NewBatcher(rdb, 256, 1, 2*time.Second, size)
	testkit.Go(t, b.Run)
	const parts = mergeMax + 36
	for i := range parts {
		if err := rdb.Set(ctx, fmt.Sprintf("%sk%d", prefix, i), fmt.Sprintf("v%d", i), time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	m := &mgetMerger{entered: make(chan struct{}), gate: make(chan struct{})}
	ps := make([]*mgetPart, parts)
	errs := make(chan error, parts+1)
	var wg sync.WaitGroup
	do := func(i int) {
		ps[i] = &mgetPart{key: fmt.Sprintf("%sk%d", prefix, i)}
		wg.Go(func() { errs <- b.DoMerged(ctx, m, ps[i]) })
	}
	do(0)
	<-m.entered // the flusher holds part 0 in its Merge
	for i := 1; i < parts; i++ {
		do(i)
	}
	set := redis.NewStatusCmd(ctx, "set", prefix+"plain", "p")
	get := redis.NewStringCmd(ctx, "get", prefix+"plain")
	wg.Go(func() { errs <- b.Do(ctx, set, get) })
	testkit.Eventually(t, 5*time.Second, func() error {
		if n := len(b.in); n != parts {
			return fmt.Errorf("%d calls queued, want %d", n, parts)
		}
		return nil
	})
	close(m.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range ps {
		if want := fmt.Sprintf("v%d", i); p.err != nil || p.val != want {
			t.Fatalf("part %d: %q, %v; want %q", i, p.val, p.err, want)
		}
	}
	if get.Val() != "p" {
		t.Fatalf("plain command beside the merged ones: %q, %v", get.Val(), get.Err())
	}
	if want := []int{1, mergeMax, parts - 1 - mergeMax}; !slices.Equal(m.sizes, want) {
		t.Fatalf("merged commands of %v parts, want %v", m.sizes, want)
	}
	// Pipeline 1: the merged part 0; pipeline 2: two merged commands and
	// the plain call's two.
	if n, sum := histogramCount(t, size), histogramSum(t, size); n != 2 || sum != 5 {
		t.Fatalf("%d pipelines of %v commands in all, want 2 of 5", n, sum)
	}
}

// TestFencedClaimsInOneCall: the fenced claims of one script call answer
// as separate calls would, in order: a second claim of a notification is
// busy, a second one over the recipient's limit rate limited, a fenced
// record and a done notification as alone; a claim whose key has the
// wrong type fails alone; without the fences' marker a done notification
// still answers duplicate and the others unsynced.
func TestFencedClaimsInOneCall(t *testing.T) {
	t.Parallel()
	s, rdb, _ := testStore(t, StoreOptions{RateLimit: 1, RateWindow: time.Minute, RatePolicy: domain.RateDrop})
	ctx := context.Background()
	p := s.opt.Prefix
	now := time.Now()
	if err := fencedClaimsScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	if err := fence.MarkSynced(ctx, rdb, p); err != nil {
		t.Fatal(err)
	}
	if err := fence.Raise(ctx, rdb, p, 2, 5); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkDone(ctx, "done1", domain.Outcome{Status: notiflowv1.Status_STATUS_DELIVERED, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	if c, err := s.ClaimFenced(ctx, "busy1", "r9", "other", domain.FenceRef{TargetID: 9, Version: 1}, false, now); err != nil || c.State != domain.Claimed {
		t.Fatalf("claim busy1: %+v, %v", c, err)
	}
	if err := rdb.HSet(ctx, s.dedupKey("bad1"), "a", "b").Err(); err != nil {
		t.Fatal(err)
	}
	// n6 is already ours (a retry of a claim that was answered too late):
	// claimed again, registered, not counted again.
	if c, err := s.ClaimFenced(ctx, "n6", "r7", "own", domain.FenceRef{TargetID: 6, Version: 1}, false, now); err != nil || c.State != domain.Claimed {
		t.Fatalf("claim n6: %+v, %v", c, err)
	}
	if err := s.ExitSend(ctx, 6, "own"); err != nil {
		t.Fatal(err)
	}
	claims := runMerged(t, s, rdb, now, []mergedClaim{
		claimOf("n1", "r1", "a", 1, 1),
		claimOf("n1", "r1", "b", 1, 1),
		claimOf("bad1", "r3", "a", 4, 1),
		claimOf("n2", "r1", "a", 1, 1),
		claimOf("n3", "r2", "a", 2, 3),
		claimOf("done1", "r4", "a", 5, 1),
		claimOf("busy1", "r9", "c", 9, 1),
		claimOf("n4", "r5", "a", 3, 1),
		claimOf("n6", "r7", "own", 6, 1),
	})
	want := []string{"claimed", "busy", "error", "rate_limited", "fenced", "duplicate", "busy", "claimed", "claimed"}
	for i, c := range claims {
		if got := claimState(s, c); got != want[i] {
			t.Errorf("claim %d: %s (answer %q, err %v), want %s", i, got, c.answer, c.err, want[i])
		}
	}
	for target, want := range map[uint64]int64{1: 1, 2: 0, 3: 1, 4: 0, 6: 1} {
		if n, err := fence.Inflight(ctx, rdb, p, target); err != nil || n != want {
			t.Errorf("target %d: %d in flight (%v), want %d", target, n, err, want)
		}
	}
	// Only new claims count against the limit: r1's n1 (its second
	// claim was busy, n2 over the limit), r5's n4 and r7's n6 once.
	window := strconv.FormatInt(now.UnixMilli()/time.Minute.Milliseconds(), 10)
	for rcp, want := range map[string]string{"r1": "1", "r2": "", "r4": "", "r5": "1", "r7": "1", "r9": "1"} {
		if got := rdb.Get(ctx, p+"rl:"+rcp+":"+window).Val(); got != want {
			t.Errorf("rate-limit count of %s: %q, want %q", rcp, got, want)
		}
	}
	if n := rdb.Exists(ctx, s.dedupKey("n3")).Val(); n != 0 {
		t.Error("the fenced claim wrote its dedup key")
	}
	if err := rdb.Del(ctx, fence.SyncedKey(p)).Err(); err != nil {
		t.Fatal(err)
	}
	claims = runMerged(t, s, rdb, now, []mergedClaim{claimOf("done1", "r4", "a", 5, 1), claimOf("n5", "r6", "a", 6, 1)})
	if a, b := claimState(s, claims[0]), claimState(s, claims[1]); a != "duplicate" || b != fence.Unsynced {
		t.Fatalf("without the marker: %s and %s, want duplicate and unsynced", a, b)
	}
	if n := rdb.Exists(ctx, s.dedupKey("n5")).Val(); n != 0 {
		t.Fatal("an unsynced claim in a merged call wrote its dedup key")
	}
}

// noScript is an error as Redis answers a call of a script it lacks.
type noScript struct{}

func (noScript) Error() string { return "NOSCRIPT No matching script." }
func (noScript) RedisError()   {}

// TestReloadingScript: a run that fails with NOSCRIPT gets the script
// loaded and runs once more; a second NOSCRIPT, or any other error, is
// returned as it is.
func TestReloadingScript(t *testing.T) {
	t.Parallel()
	s, rdb, _ := testStore(t, StoreOptions{})
	ctx := context.Background()
	// A script of this test alone, in no script cache until loaded here.
	script := redis.NewScript("return '" + s.opt.Prefix + "reload'")
	if ok, err := rdb.ScriptExists(ctx, script.Hash()).Result(); err != nil || ok[0] {
		t.Fatalf("the test's script is cached before the test: %v", err)
	}
	for _, tt := range []struct {
		name      string
		fails     []error // the answers of the runs, in turn
		wantRuns  int
		wantErr   error
		wantCache bool
	}{
		{"no error", []error{nil}, 1, nil, false},
		{"other error", []error{redis.Nil}, 1, redis.Nil, false},
		{"script reloaded", []error{noScript{}, nil}, 2, nil, true},
		{"still missing", []error{noScript{}, noScript{}}, 2, noScript{}, true},
	} {
		runs := 0
		err := s.reloadingScript(ctx, script, func() error {
			runs++
			return tt.fails[runs-1]
		})
		if runs != tt.wantRuns || !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: %d runs, %v; want %d, %v", tt.name, runs, err, tt.wantRuns, tt.wantErr)
		}
		if tt.wantCache {
			if ok, err := rdb.ScriptExists(ctx, script.Hash()).Result(); err != nil || !ok[0] {
				t.Errorf("%s: script not loaded (%v)", tt.name, err)
			}
		}
	}
}

// TestFencedClaimsWithoutRateLimit: without a rate limit a claim takes its
// dedup key with SET NX and the call reads all fences at once; every
// answer is still the one-claim script's: claimed, busy, claimed again
// for its own token, duplicate, fenced (nothing written) and, behind a
// fence key of the wrong type, an error for its own claim only, while a
// done notification of that target still answers duplicate and the other
// claims of the call are judged by their own fences.
func TestFencedClaimsWithoutRateLimit(t *testing.T) {
	t.Parallel()
	s, rdb, _ := testStore(t, StoreOptions{})
	ctx := context.Background()
	p := s.opt.Prefix
	now := time.Now()
	if err := fence.MarkSynced(ctx, rdb, p); err != nil {
		t.Fatal(err)
	}
	if err := fence.Raise(ctx, rdb, p, 2, 5); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"done1", "done7"} {
		if err := s.MarkDone(ctx, id, domain.Outcome{Status: notiflowv1.Status_STATUS_DELIVERED, Attempts: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := s.ClaimFenced(ctx, "own1", "r1", "own", domain.FenceRef{TargetID: 3, Version: 1}, false, now); err != nil || c.State != domain.Claimed {
		t.Fatalf("claim own1: %+v, %v", c, err)
	}
	call := func(claims ...mergedClaim) string {
		t.Helper()
		var out []string
		for _, c := range runMerged(t, s, rdb, now, claims) {
			out = append(out, claimState(s, c))
		}
		return fmt.Sprint(out)
	}
	if err := rdb.HSet(ctx, s.dedupKey("bad1"), "a", "b").Err(); err != nil {
		t.Fatal(err)
	}
	got := call(claimOf("n1", "r1", "a", 1, 1), claimOf("n1", "r1", "b", 1, 1), claimOf("own1", "r1", "own", 3, 1),
		claimOf("done1", "r1", "a", 4, 1), claimOf("n2", "r2", "a", 2, 3), claimOf("done7", "r2", "a", 2, 3),
		claimOf("n3", "r3", "a", 2, 5), claimOf("bad1", "r3", "a", 5, 1))
	if want := fmt.Sprint([]string{"claimed", "busy", "claimed", "duplicate", "fenced", "duplicate", "claimed", "error"}); got != want {
		t.Fatalf("answers %v, want %v", got, want)
	}
	if n := rdb.Exists(ctx, s.dedupKey("n2")).Val(); n != 0 {
		t.Error("the fenced claim wrote its dedup key")
	}
	// A claim taken with SET NX lives for the in-flight TTL, as one taken
	// with SET does.
	if ttl := rdb.PTTL(ctx, s.dedupKey("n1")).Val(); ttl <= 0 || ttl > s.opt.InflightTTL {
		t.Errorf("claim n1 expires in %s; want within the in-flight TTL %s", ttl, s.opt.InflightTTL)
	}
	for target, want := range map[uint64]int64{1: 1, 2: 1, 3: 1, 5: 0} {
		if n, err := fence.Inflight(ctx, rdb, p, target); err != nil || n != want {
			t.Errorf("target %d: %d in flight (%v), want %d", target, n, err, want)
		}
	}

	// Target 8's fence key holds a hash: its new claim fails, its done
	// notification is still a duplicate, and the other claims of the call
	// are judged by their own fences.
	if err := rdb.HSet(ctx, fence.Key(p, 8), "a", "b").Err(); err != nil {
		t.Fatal(err)
	}
	got = call(claimOf("n8", "r8", "a", 8, 1), claimOf("done7", "r8", "a", 8, 1), claimOf("n9", "r9", "a", 2, 1),
		claimOf("n10", "r9", "a", 11, 1))
	if want := fmt.Sprint([]string{"error", "duplicate", "fenced", "claimed"}); got != want {
		t.Fatalf("with a fence key of the wrong type: answers %v, want %v", got, want)
	}
	for _, id := range []string{"n8", "n9"} {
		if n := rdb.Exists(ctx, s.dedupKey(id)).Val(); n != 0 {
			t.Errorf("claim %s wrote its dedup key", id)
		}
	}
}

// mergedClaim is one claim of a merged script call in a test; signing
// reads its target's signing record too.
type mergedClaim struct {
	id, recipient, token string
	ref                  domain.FenceRef
	signing              bool
}

func claimOf(id, recipient, token string, target, version uint64) mergedClaim {
	return mergedClaim{id, recipient, token, domain.FenceRef{TargetID: target, Version: version}, false}
}

// signingClaimOf is claimOf of a webhook whose claim reads its target's
// signing record.
func signingClaimOf(id, recipient, token string, target, version uint64) mergedClaim {
	c := claimOf(id, recipient, token, target, version)
	c.signing = true
	return c
}

// runMerged sends claims as one call of fencedClaimsScript (loading the
// script when Redis lacks it), with the reads merged beside it, in one
// pipeline, and returns each claim with its answer.
func runMerged(t *testing.T, s *Store, rdb *redis.Client, now time.Time, claims []mergedClaim) []*fencedClaim {
	t.Helper()
	ctx := context.Background()
	parts := make([]any, len(claims))
	out := make([]*fencedClaim, len(claims))
	for i, c := range claims {
		out[i], _ = s.fencedClaim(c.id, c.recipient, c.token, c.ref, now)
		out[i].signing = c.signing
		parts[i] = out[i]
	}
	cmds := s.claims.Merge(ctx, parts)
	if err := s.reloadingScript(ctx, fencedClaimsScript, func() error {
		pipe := rdb.Pipeline()
		for _, cmd := range cmds {
			_ = pipe.Process(ctx, cmd)
		}
		_, _ = pipe.Exec(ctx)
		return cmds[0].Err()
	}); err != nil {
		t.Fatal(err)
	}
	s.claims.Answer(cmds, parts)
	return out
}

// claimState names c's answer: claimed, busy, duplicate, rate_limited,
// deferred, fenced, unsynced, or error when the claim failed.
func claimState(s *Store, c *fencedClaim) string {
	switch {
	case c.err != nil:
		return "error"
	case c.answer == fence.Fenced || c.answer == fence.Unsynced:
		return c.answer
	}
	cl, err := s.claimAnswer("x", c.answer, time.Time{})
	if err != nil {
		return "bad answer " + c.answer
	}
	return [...]string{domain.Claimed: "claimed", domain.Busy: "busy", domain.Duplicate: "duplicate",
		domain.RateLimited: "rate_limited", domain.Deferred: "deferred"}[cl.State]
}

// TestFencedClaimsReadSigningRecords: in a merged call, each claim that
// asks for its target's signing record gets that record (or word that
// Redis has none), read in the same pipeline, whatever the claims between
// them; a record that cannot be read (a key of the wrong type) is not
// read for its claim alone, whose answer stays its own; the other claims
// read nothing.
func TestFencedClaimsReadSigningRecords(t *testing.T) {
	t.Parallel()
	s, rdb, _ := testStore(t, StoreOptions{})
	ctx := context.Background()
	p := s.opt.Prefix
	if err := fence.MarkSynced(ctx, rdb, p); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	recs := map[uint64]webhooksig.Record{
		1: {Version: 3, Current: "whsec_one", Previous: "whsec_old", PreviousUntil: until},
		4: {Version: 1, Current: "whsec_four"},
	}
	for target, rec := range recs {
		if err := webhooksig.Store(ctx, rdb, p, target, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.Set(ctx, webhooksig.RedisKey(p, 5), "not a record", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	claims := runMerged(t, s, rdb, time.Now(), []mergedClaim{
		signingClaimOf("n1", "r1", "a", 1, 1),
		claimOf("n2", "r2", "a", 4, 1),
		signingClaimOf("n3", "r3", "a", 3, 1),
		signingClaimOf("n5", "r5", "a", 5, 1),
		claimOf("n6", "r6", "a", 6, 1),
		signingClaimOf("n4", "r4", "a", 4, 1),
	})
	type read struct {
		read, ok bool
		cur      string
		prev     string
		until    time.Time
	}
	want := []read{
		{true, true, "whsec_one", "whsec_old", until},
		{},
		{true, false, "", "", time.Time{}},
		{},
		{},
		{true, true, "whsec_four", "", time.Time{}},
	}
	for i, c := range claims {
		if got := claimState(s, c); got != "claimed" {
			t.Errorf("claim %d: %s (%v), want claimed", i, got, c.err)
		}
		got := read{c.recRead, c.recOK, c.rec.Current, c.rec.Previous, c.rec.PreviousUntil}
		if !got.until.Equal(want[i].until) || got.read != want[i].read || got.ok != want[i].ok || got.cur != want[i].cur || got.prev != want[i].prev {
			t.Errorf("claim %d read %+v, want %+v", i, got, want[i])
		}
	}
}

// countingRunner counts the commands Secrets sends itself.
type countingRunner struct {
	b *Batcher
	n atomic.Int64
}

func (r *countingRunner) Do(ctx context.Context, cmds ...redis.Cmder) error {
	r.n.Add(int64(len(cmds)))
	return r.b.Do(ctx, cmds...)
}

// TestClaimFencedPrimesSigningKeys: a webhook's claim brings its target's
// signing record into the secrets' cache, read in the claim's own
// pipeline, so that its send gets its keys (the target's own, or the
// missing-secret error, or the global ones) without a read of its own,
// whatever the claim answered; a record already cached and fresh, a
// claim that is not a webhook's and a record that cannot be read bring
// nothing, and the send reads Redis itself.
func TestClaimFencedPrimesSigningKeys(t *testing.T) {
	t.Parallel()
	rdb, prefix := testkit.Redis(t)
	ctx := context.Background()
	size := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "size", Buckets: []float64{1, 2, 8, 64}})
	b := NewBatcher(rdb, 64, 1, 2*time.Second, size)
	testkit.Go(t, b.Run)
	reads := &countingRunner{b: b}
	global := newSecret(t)
	secrets, err := NewSecrets(reads, SecretsOptions{Prefix: prefix, Global: []string{global}, CacheTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(rdb, b, StoreOptions{Prefix: prefix, InflightTTL: 10 * time.Second, DoneTTL: time.Hour, Signing: secrets})
	// Loaded first, so that no claim is sent twice (NOSCRIPT, then again).
	if err := fencedClaimsScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	if err := fence.MarkSynced(ctx, rdb, prefix); err != nil {
		t.Fatal(err)
	}
	own := newSecret(t)
	for _, target := range []uint64{1, 3, 5} {
		if err := webhooksig.Store(ctx, rdb, prefix, target, webhooksig.Record{Version: 1, Current: own}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.Set(ctx, webhooksig.RedisKey(prefix, 4), "not a record", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkDone(ctx, "done3", domain.Outcome{Status: notiflowv1.Status_STATUS_DELIVERED, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	// claim claims id and checks that it took one pipeline, of cmds
	// commands.
	claim := func(id string, target uint64, signing bool, want domain.ClaimState, cmds float64) {
		t.Helper()
		n0, sum0 := histogramCount(t, size), histogramSum(t, size)
		c, err := s.ClaimFenced(ctx, id, "rcp", "tok-"+id, domain.FenceRef{TargetID: target, Version: 1}, signing, time.Now())
		if err != nil || c.State != want {
			t.Fatalf("claim %s: %+v, %v; want state %d", id, c, err, want)
		}
		if n, sum := histogramCount(t, size)-n0, histogramSum(t, size)-sum0; n != 1 || sum != cmds {
			t.Errorf("claim %s: %d pipelines of %v commands, want 1 of %v", id, n, sum, cmds)
		}
	}
	keys := func(target uint64, required bool) (string, error) {
		t.Helper()
		k, err := secrets.Keys(ctx, &notiflowv1.NotificationDue{TargetId: target, WebhookSecretRequired: required})
		if len(k) != 1 {
			return fmt.Sprintf("%d keys", len(k)), err
		}
		for name, secret := range map[string]string{"own": own, "global": global} {
			if key, _ := webhooksig.Decode(secret); string(key) == string(k[0]) {
				return name, err
			}
		}
		return "another key", err
	}
	sends := func(target uint64, required bool, want string, wantReads int64) {
		t.Helper()
		before := reads.n.Load()
		got, err := keys(target, required)
		if err != nil && !errors.Is(err, ErrSecretMissing) {
			got = "error"
		} else if err != nil {
			got = "missing"
		}
		if got != want || reads.n.Load()-before != wantReads {
			t.Errorf("target %d: keys %s (%v) with %d reads of its own, want %s with %d", target, got, err, reads.n.Load()-before, want, wantReads)
		}
	}

	claim("n1", 1, true, domain.Claimed, 2)
	sends(1, true, "own", 0)
	// Target 2 has no record: the claim brings that word, the send
	// fails without a read (required) or signs with the global secret.
	claim("n2", 2, true, domain.Claimed, 2)
	sends(2, true, "missing", 0)
	sends(2, false, "global", 0)
	// A duplicate's read is as good: cached too.
	claim("done3", 3, true, domain.Duplicate, 2)
	sends(3, true, "own", 0)
	// Target 4's record cannot be read: the claim stands, the send reads
	// Redis itself and fails.
	claim("n4", 4, true, domain.Claimed, 2)
	sends(4, true, "error", 1)
	// Not a webhook: nothing read.
	claim("n5", 5, false, domain.Claimed, 1)
	sends(5, true, "own", 1)

	// A record cached and fresh is not read again by the next claim: a
	// rotation written now is seen once the cache ages.
	if err := webhooksig.Store(ctx, rdb, prefix, 1, webhooksig.Record{Version: 2, Current: global}); err != nil {
		t.Fatal(err)
	}
	claim("n1b", 1, true, domain.Claimed, 1)
	sends(1, true, "own", 0)
}

// Secrets.Wants asks for a record the cache lacks or read half its TTL
// ago or more, by the Secrets' own clock; Prime keeps the record stamped
// latest; without a cache neither reads nor keeps anything.
func TestSecretsWantsAndPrime(t *testing.T) {
	t.Parallel()
	clock := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	s, err := NewSecrets(nil, SecretsOptions{CacheTTL: 10 * time.Second, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	want := func(target uint64, wantIt bool) time.Time {
		t.Helper()
		at, ok := s.Wants(target)
		if ok != wantIt || !at.Equal(clock) {
			t.Fatalf("Wants(%d) at %s = %v, %s; want %v, the clock", target, clock, ok, at, wantIt)
		}
		return at
	}
	current := func(target uint64) string {
		t.Helper()
		rec, ok, err := s.record(context.Background(), target, clock)
		if err != nil || !ok {
			t.Fatalf("record of %d: ok %v, err %v", target, ok, err)
		}
		return rec.Current
	}
	at := want(1, true)
	s.Prime(1, webhooksig.Record{Current: "whsec_new"}, true, at)
	clock = clock.Add(4999 * time.Millisecond)
	want(1, false)
	// A read stamped earlier than the cached one does not replace it.
	s.Prime(1, webhooksig.Record{Current: "whsec_old"}, true, at.Add(-time.Second))
	if got := current(1); got != "whsec_new" {
		t.Fatalf("after an older read: %s, want whsec_new", got)
	}
	clock = clock.Add(time.Millisecond)
	at = want(1, true)
	s.Prime(1, webhooksig.Record{Current: "whsec_newer"}, true, at)
	if got := current(1); got != "whsec_newer" {
		t.Fatalf("after a later read: %s, want whsec_newer", got)
	}

	off, err := NewSecrets(nil, SecretsOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := off.Wants(1); ok {
		t.Fatal("without a cache Wants asks for a read")
	}
	off.Prime(1, webhooksig.Record{Current: "whsec_x"}, true, clock)
	if len(off.cache) != 0 {
		t.Fatal("without a cache Prime kept a record")
	}
}

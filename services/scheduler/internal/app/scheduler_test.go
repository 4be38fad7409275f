package app_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// TestOccurrencesOverTicks drives one scheduler with a fake clock, tick by
// tick, from 2026-03-06 12:00Z to 2026-03-10 00:00Z (across the New York DST
// change of 2026-03-08) with a downtime on 2026-03-08, and checks that every
// target yields exactly the expected occurrences in MariaDB.
func TestOccurrencesOverTicks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	clk := &clock{t: ts("2026-03-06T12:00:00Z")}
	in := e.instance(t, instanceOpts{clock: clk.Now, policy: domain.MissedPolicy{Collapse: true}})
	ctx := context.Background()

	due := ts("2026-03-07T10:00:00Z")
	inputs := map[string]app.TargetInput{
		"ny-9am":     {Cron: "0 9 * * *", TimeZone: "America/New_York"},
		"berlin-9am": {Cron: "0 9 * * *", TimeZone: "Europe/Berlin"},
		"ny-0230":    {Cron: "30 2 * * *", TimeZone: "America/New_York"},
		"every-6h":   {Cron: "0 */6 * * *"},
		"one-shot":   {DueAt: &due},
		"paused":     {Cron: "@hourly", TimeZone: "Asia/Tokyo"},
	}
	want := map[string][]string{
		"ny-9am":     {"2026-03-06T14:00:00Z", "2026-03-07T14:00:00Z", "2026-03-08T13:00:00Z", "2026-03-09T13:00:00Z"},
		"berlin-9am": {"2026-03-07T08:00:00Z", "2026-03-08T08:00:00Z", "2026-03-09T08:00:00Z"},
		// 02:30 does not exist in New York on 2026-03-08: it fires when the
		// gap ends, 03:00 EDT (the DST rule), a slot in the downtime that
		// is caught up after it.
		"ny-0230": {"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"},
		// The slots 06, 12 and 18 of 2026-03-08 fall in the downtime and
		// collapse into one occurrence, the first missed slot.
		"every-6h": {"2026-03-06T18:00:00Z", "2026-03-07T00:00:00Z", "2026-03-07T06:00:00Z", "2026-03-07T12:00:00Z",
			"2026-03-07T18:00:00Z", "2026-03-08T00:00:00Z", "2026-03-08T06:00:00Z", "2026-03-09T00:00:00Z",
			"2026-03-09T06:00:00Z", "2026-03-09T12:00:00Z", "2026-03-09T18:00:00Z"},
		"one-shot": {"2026-03-07T10:00:00Z"},
		"paused":   nil,
	}
	ids := map[int64]string{}
	for name, tin := range inputs {
		tin.RecipientID, tin.Channel, tin.TemplateID = name, "inbox", "tmpl"
		tg, err := in.targets.Create(ctx, tin)
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		ids[tg.ID] = name
		if name == "paused" {
			if _, err := in.targets.Pause(ctx, tg.ID); err != nil {
				t.Fatal(err)
			}
		}
	}

	downFrom, downTo := ts("2026-03-08T01:00:00Z"), ts("2026-03-08T20:00:00Z")
	for now := clk.Now(); now.Before(ts("2026-03-10T00:00:00Z")); now = now.Add(20 * time.Minute) {
		if !now.Before(downFrom) && now.Before(downTo) {
			continue // nothing scans during the downtime
		}
		clk.Set(now)
		in.sched.Tick(ctx)
	}

	rows, err := in.store.DB().QueryContext(ctx, `SELECT target_id, occurrence_at FROM outbox ORDER BY target_id, occurrence_at`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string][]string{}
	for rows.Next() {
		var id int64
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			t.Fatal(err)
		}
		got[ids[id]] = append(got[ids[id]], at.UTC().Format(time.RFC3339))
	}
	for name, w := range want {
		if fmt.Sprint(got[name]) != fmt.Sprint(w) {
			t.Errorf("%s:\n got  %v\n want %v", name, got[name], w)
		}
	}
	all, err := in.store.ListTargets(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var done []string
	for _, tg := range all {
		if tg.Status == domain.StatusDone {
			done = append(done, ids[tg.ID])
		}
	}
	if fmt.Sprint(done) != "[one-shot]" {
		t.Errorf("done targets = %v, want the one-shot", done)
	}
	// The one-shot's row is settled to done after the claim.
	if n, _, err := in.store.SettleOneShots(ctx, 1000); err != nil || n != 1 {
		t.Errorf("settled %d, %v; want the one-shot", n, err)
	}
	var doneCount int
	_ = in.store.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM notification_targets WHERE status = 'done'`).Scan(&doneCount)
	if doneCount != 1 {
		t.Errorf("done targets stored = %d, want 1 (the one-shot)", doneCount)
	}
}

// TestThreeSchedulers runs three replicas on one database and topic: N
// due targets give exactly N outbox rows and N distinct notification ids on
// Kafka, whoever holds the lock.
func TestThreeSchedulers(t *testing.T) {
	t.Parallel()
	const n = 3000
	e := newEnv(t, 12)
	var reps []*instance
	for i := 0; i < 3; i++ {
		reps = append(reps, e.instance(t, instanceOpts{claimBatch: 100, relayBatch: 500}))
	}
	cons := e.consume(t)
	createDue(t, reps[0].store, n, 300, time.Now().Add(-time.Minute), "run-3")
	var stops []func() error
	for _, r := range reps {
		stops = append(stops, r.run(t))
	}
	cons.waitDistinct(t, n, 60*time.Second)
	testkit.Eventually(t, 30*time.Second, func() error {
		if rows, unpub, distinct := outboxCounts(t, reps[0].store); rows != n || unpub != 0 || distinct != n {
			return testkit.Errorf("outbox rows %d, unpublished %d, distinct ids %d; want %d, 0, %d", rows, unpub, distinct, n, n)
		}
		return nil
	})
	for i, stop := range stops {
		if err := stop(); err != nil {
			t.Errorf("replica %d: Run: %v", i, err)
		}
	}
	var claimed float64
	for _, r := range reps {
		claimed += value(r.metrics.Claimed)
	}
	if claimed != n {
		t.Errorf("claimed %v targets in total, want %d", claimed, n)
	}
	checkConsumed(t, e, reps[0], cons)
}

// checkConsumed compares what Kafka carried with the outbox: the same ids,
// the recipient as key, the contract headers, and per recipient increasing
// sequences in offset order.
func checkConsumed(t *testing.T, e *env, in *instance, cons *consumer) {
	t.Helper()
	rows, err := in.store.DB().QueryContext(context.Background(), `SELECT o.id, o.target_id, o.occurrence_at, t.created_at, t.recipient_id
		FROM outbox o JOIN notification_targets t ON t.id = o.target_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := cons.ids()
	type rec struct {
		off int64
		seq uint64
	}
	byRecipient := map[string][]rec{}
	for rows.Next() {
		var (
			rcpt              string
			seq               uint64
			target            int64
			occurred, created time.Time
		)
		if err := rows.Scan(&seq, &target, &occurred, &created, &rcpt); err != nil {
			t.Fatal(err)
		}
		id := domain.NotificationID(target, created, occurred)
		rs := cons.records(id)
		if len(rs) == 0 {
			t.Errorf("outbox row %s never reached Kafka", id)
			continue
		}
		r := rs[0]
		if r.key != rcpt || r.recipient != rcpt || r.sequence != seq {
			t.Errorf("record %s: key %q recipient %q sequence %d; want %q, %d", id, r.key, r.recipient, r.sequence, rcpt, seq)
		}
		if r.headers[kafkax.HeaderContentType] != kafkax.ContentTypeProtobuf || r.headers[kafkax.HeaderSchemaVersion] != kafkax.SchemaVersion {
			t.Errorf("record %s: headers %v", id, r.headers)
		}
		byRecipient[rcpt] = append(byRecipient[rcpt], rec{off: r.offset, seq: r.sequence})
		delete(seen, id)
	}
	if len(seen) != 0 {
		t.Errorf("%d notification ids on Kafka are not in the outbox", len(seen))
	}
	for rcpt, rs := range byRecipient {
		sort.Slice(rs, func(i, j int) bool { return rs[i].off < rs[j].off })
		for i := 1; i < len(rs); i++ {
			if rs[i].seq <= rs[i-1].seq {
				t.Errorf("recipient %s: sequence %d after %d in offset order", rcpt, rs[i].seq, rs[i-1].seq)
				break
			}
		}
	}
}

// TestLockHolderKilledMidBatch cuts the lock holder off from Redis while a
// claim transaction is open: its extend fails, the batch rolls back,
// another replica takes over after the lock expires, and nothing is lost.
func TestLockHolderKilledMidBatch(t *testing.T) {
	t.Parallel()
	const n = 3000
	e := newEnv(t, 12)
	var victim atomic.Int32
	victim.Store(-1)
	midBatch := make(chan struct{})
	var reps []*instance
	for i := 0; i < 3; i++ {
		r := e.instance(t, instanceOpts{claimBatch: 100, relayBatch: 500, lockTTL: 2 * time.Second})
		var batches atomic.Int32
		r.store.BeforeClaimCommit = func(ctx context.Context) error {
			if batches.Add(1) == 5 && victim.CompareAndSwap(-1, int32(i)) {
				close(midBatch)
				<-ctx.Done() // hold the transaction open until the lease ends
				return context.Cause(ctx)
			}
			return nil
		}
		reps = append(reps, r)
	}
	cons := e.consume(t)
	createDue(t, reps[0].store, n, 500, time.Now().Add(-time.Minute), "")
	var stops []func() error
	for _, r := range reps {
		stops = append(stops, r.run(t))
	}
	select {
	case <-midBatch:
	case <-time.After(60 * time.Second):
		t.Fatal("no replica reached its fifth batch")
	}
	v := reps[victim.Load()]
	_ = v.rdb.Close() // the holder loses Redis: it cannot extend, and cannot come back
	testkit.Eventually(t, 10*time.Second, func() error {
		if value(v.metrics.LockLost) != 1 {
			return testkit.Errorf("victim has not noticed the lost lock")
		}
		return nil
	})
	if err := stops[victim.Load()](); err != nil { // and then the process is gone
		t.Fatalf("victim Run: %v", err)
	}
	cons.waitDistinct(t, n, 60*time.Second)
	testkit.Eventually(t, 30*time.Second, func() error {
		if rows, unpub, distinct := outboxCounts(t, reps[0].store); rows != n || unpub != 0 || distinct != n {
			return testkit.Errorf("outbox rows %d, unpublished %d, distinct ids %d; want %d, 0, %d", rows, unpub, distinct, n, n)
		}
		return nil
	})
	var others float64
	for i, r := range reps {
		if int32(i) != victim.Load() {
			others += value(r.metrics.Claimed)
		}
	}
	if others == 0 {
		t.Fatal("no other replica took over")
	}
	if got := value(v.metrics.Claimed); got != 400 { // four committed batches of 100
		t.Errorf("victim claimed %v, want 400 (its fifth batch rolled back)", got)
	}
	checkConsumed(t, e, reps[0], cons)
}

// TestRelayRepublishesAfterCrash publishes a batch, "crashes" before
// marking it, and lets a restarted replica relay again: the re-published
// records carry the same notification ids and sequences.
func TestRelayRepublishesAfterCrash(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	ctx := context.Background()
	first := e.instance(t, instanceOpts{})
	cons := e.consume(t)
	createDue(t, first.store, 5, 5, time.Now().Add(-time.Second), "run-crash")
	errCrash := errors.New("crash between publish and mark")
	first.relay.AfterPublish = func(context.Context, []domain.Notification) error { return errCrash }
	first.sched.Tick(ctx) // claims, acquires the lease
	if _, err := first.sched.Flush(ctx); !errors.Is(err, errCrash) {
		t.Fatalf("Flush = %v, want the crash", err)
	}
	cons.waitDistinct(t, 5, 30*time.Second)
	if _, unpub, _ := outboxCounts(t, first.store); unpub != 5 {
		t.Fatalf("unpublished rows after the crash = %d, want 5", unpub)
	}
	first.leader.Release(ctx) // the replica is gone (a crash would let the lock expire)

	second := e.instance(t, instanceOpts{})
	second.sched.Tick(ctx) // takes the lease; nothing left to claim
	if n, err := second.sched.Flush(ctx); err != nil || n != 5 {
		t.Fatalf("second Flush = %d, %v; want 5 re-published", n, err)
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		if _, total, _ := cons.counts(); total != 10 {
			return testkit.Errorf("consumed %d records, want 10", total)
		}
		return nil
	})
	for id, count := range cons.ids() {
		rs := cons.records(id)
		if count != 2 || rs[0].sequence != rs[1].sequence || rs[0].key != rs[1].key || rs[0].headers[kafkax.HeaderRunID] != "run-crash" {
			t.Errorf("notification %s: %d records %+v %+v; want 2 identical", id, count, rs[0], rs[len(rs)-1])
		}
	}
	if _, unpub, _ := outboxCounts(t, second.store); unpub != 0 {
		t.Fatalf("unpublished rows = %d, want 0", unpub)
	}
}

// TestGracefulShutdownReleasesLock checks the shutdown order: Run returns
// nil, the lock is released (another replica takes it at once) and no
// claimed row is left unpublished.
func TestGracefulShutdownReleasesLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	a := e.instance(t, instanceOpts{lockTTL: 30 * time.Second})
	stop := a.run(t)
	testkit.Eventually(t, 10*time.Second, func() error {
		if value(a.metrics.LockHeld) != 1 {
			return testkit.Errorf("lock not held yet")
		}
		return nil
	})
	createDue(t, a.store, 20000, 100, time.Now().Add(-time.Second), "")
	testkit.Eventually(t, 10*time.Second, func() error {
		if value(a.metrics.Claimed) == 0 {
			return testkit.Errorf("nothing claimed yet")
		}
		return nil
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if value(a.metrics.LockHeld) != 0 {
		t.Fatal("lock still marked held after Run returned")
	}
	_, unpub, _ := outboxCounts(t, a.store)
	if unpub != 0 {
		t.Errorf("%d claimed rows left unpublished after a graceful stop", unpub)
	}
	b := e.instance(t, instanceOpts{lockTTL: 30 * time.Second})
	if _, ok := b.leader.Acquire(context.Background()); !ok {
		t.Fatal("another replica cannot take the lock right after a graceful stop")
	}
	b.leader.Release(context.Background())
}

// TestRunningSchedulerSettlesOneShots: a running scheduler claims and
// publishes due one-shots, then settles their stored status to done off
// the claim's path (its housekeeping, once no tick is claiming).
func TestRunningSchedulerSettlesOneShots(t *testing.T) {
	t.Parallel()
	const n = 3000
	e := newEnv(t, 3)
	in := e.instance(t, instanceOpts{claimBatch: 500})
	createDue(t, in.store, n, 100, time.Now().Add(-time.Second), "")
	stop := in.run(t)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	testkit.Eventually(t, 30*time.Second, func() error {
		var stored int
		if err := in.store.DB().QueryRow(`SELECT COUNT(*) FROM notification_targets WHERE status = 'done'`).Scan(&stored); err != nil {
			return err
		}
		if published, settled := value(in.metrics.Published), value(in.metrics.Settled); published != n || settled != n || stored != n {
			return testkit.Errorf("published %v, settled %v, stored done %d; want %d each", published, settled, stored, n)
		}
		return nil
	})
}

// scans is how many scans in has made (samples of its scan-duration
// histogram).
func scans(t *testing.T, in *instance) uint64 {
	t.Helper()
	var m dto.Metric
	if err := in.metrics.ScanDuration.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestTickWakesAtTheNextDueTime: targets falling due less than a tick
// after a scan are claimed by that tick at their due time, not by a later
// tick; targets due later than a tick away are left to the ticks.
func TestTickWakesAtTheNextDueTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	in := e.instance(t, instanceOpts{tick: time.Minute})
	ctx := context.Background()

	createDue(t, in.store, 5, 5, time.Now().Add(2*time.Minute), "")
	due := time.Now().Add(1500 * time.Millisecond)
	createDue(t, in.store, 10, 10, due, "")
	in.sched.Tick(ctx)
	returned := time.Now()
	if got := value(in.metrics.Claimed); got != 10 {
		t.Fatalf("one tick claimed %v targets; want the 10 due %s after it began", got, 1500*time.Millisecond)
	}
	if n := scans(t, in); n != 2 {
		t.Fatalf("%d scans; want 2: one before the due time (nothing due) and one at it", n)
	}
	if returned.Before(due) {
		t.Fatalf("the tick returned at %s, before the targets' due time %s", returned, due)
	}
	// The two minutes' targets are more than a tick away: no wait for them.
	if late := returned.Sub(due); late > 30*time.Second {
		t.Fatalf("the tick returned %s after the due time: it waited for targets more than a tick away", late)
	}
}

// TestTickSpacesItsScans: due times spread over 400 ms are claimed by one
// tick in scans at least minScanGap apart, not in a scan each.
func TestTickSpacesItsScans(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	in := e.instance(t, instanceOpts{tick: time.Minute})
	first := time.Now().Add(time.Second)
	for i := range 40 {
		createDue(t, in.store, 1, 1, first.Add(time.Duration(i)*10*time.Millisecond), "")
	}
	in.sched.Tick(context.Background())
	if got := value(in.metrics.Claimed); got != 40 {
		t.Fatalf("one tick claimed %v targets; want the 40 due within a tick", got)
	}
	// One scan before the first due time, then about one every 50 ms over
	// the 400 ms: 10, and a few more when the machine is slow to wake.
	if n := scans(t, in); n > 13 {
		t.Fatalf("%d scans for 40 due times over 400 ms; want at most 13", n)
	}
}

// TestTickLeavesLockedDueEntries: a due entry the scan skips (another
// transaction locks it) is left to a later tick, which claims it once it
// is free, while the tick still wakes for an entry falling due within a
// tick; it does not scan again and again for the locked one.
func TestTickLeavesLockedDueEntries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	in := e.instance(t, instanceOpts{tick: time.Minute})
	ids := createDue(t, in.store, 1, 1, time.Now().Add(-time.Second), "")
	createDue(t, in.store, 1, 1, time.Now().Add(time.Second), "")

	var at time.Time
	if err := in.store.DB().QueryRow(`SELECT next_run_at FROM target_due WHERE target_id = ?`, ids[0]).Scan(&at); err != nil {
		t.Fatal(err)
	}
	tx, err := in.store.DB().Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	// By its whole key, so that only this entry is locked.
	var one int
	if err := tx.QueryRow(`SELECT 1 FROM target_due WHERE next_run_at = ? AND target_id = ? FOR UPDATE`, at, ids[0]).Scan(&one); err != nil {
		t.Fatalf("lock the due entry: %v", err)
	}
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		in.sched.Tick(context.Background())
	}()
	select {
	case <-returned:
	case <-time.After(20 * time.Second):
		t.Fatal("the tick did not return while a due entry it cannot claim is in the queue")
	}
	if got := value(in.metrics.Claimed); got != 1 {
		t.Fatalf("claimed %v targets; want the one falling due a second later, not the locked one", got)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	in.sched.Tick(context.Background())
	if got := value(in.metrics.Claimed); got != 2 {
		t.Fatalf("the next tick brought the targets claimed to %v; want 2, the locked entry claimed once free", got)
	}
}

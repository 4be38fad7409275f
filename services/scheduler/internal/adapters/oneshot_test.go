package adapters

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// storedStatus returns the status column of target id.
func storedStatus(t *testing.T, s *MySQLStore, id int64) string {
	t.Helper()
	var st string
	if err := s.DB().QueryRowContext(context.Background(), `SELECT status FROM notification_targets WHERE id = ?`, id).Scan(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestOneShotFiresFromItsQueueEntry: a one-shot's claim writes its outbox
// row (with the target's run) from the queue entry alone and leaves the
// target row as it was; reads report it done at once, the API cannot pause
// it, and SettleOneShots later stores done with the claim's time.
func TestOneShotFiresFromItsQueueEntry(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	a, b, c := oneShot(t, "a", now.Add(-time.Minute)), oneShot(t, "b", now.Add(-time.Minute)), oneShot(t, "c", now.Add(time.Hour))
	a.RunID = "run-x"
	ids, err := s.CreateTargets(ctx, []domain.Target{a, b, c})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.ClaimDue(ctx, now, 10, domain.Planner{})
	if err != nil || res.Targets != 2 || res.Inserted != 2 {
		t.Fatalf("claim: %+v, %v; want the two due one-shots", res, err)
	}
	var runID string
	if err := s.DB().QueryRowContext(ctx, `SELECT run_id FROM outbox WHERE target_id = ?`, ids[0]).Scan(&runID); err != nil || runID != "run-x" {
		t.Fatalf("outbox run_id = %q, %v; want run-x", runID, err)
	}
	var untouched int
	if err := s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM notification_targets WHERE status = 'active' AND updated_at = ?`,
		now.Add(-time.Minute)).Scan(&untouched); err != nil || untouched != 2 {
		t.Fatalf("%d target rows as created, %v; want the two claimed ones untouched", untouched, err)
	}
	for i, want := range []domain.Status{domain.StatusDone, domain.StatusDone, domain.StatusActive} {
		got, err := s.GetTarget(ctx, ids[i])
		if err != nil || got.Status != want {
			t.Fatalf("get target %d: %s, %v; want %s", i, got.Status, err, want)
		}
	}
	page, err := s.ListTargets(ctx, 0, 10)
	if err != nil || len(page) != 3 || page[0].Status != domain.StatusDone || page[2].Status != domain.StatusActive {
		t.Fatalf("list = %+v, %v", page, err)
	}
	_, err = s.UpdateTarget(ctx, ids[0], func(t domain.Target) (domain.Target, error) { return t.Pause(now) })
	if !errors.Is(err, domain.ErrConflict) {
		t.Fatalf("pause of a fired one-shot: %v; want a conflict", err)
	}
	if _, err := s.UpdateTarget(ctx, ids[1], func(t domain.Target) (domain.Target, error) { return t.Delete(now) }); err != nil {
		t.Fatal(err)
	}
	if n, more, err := s.SettleOneShots(ctx, 100); err != nil || n != 1 || more {
		t.Fatalf("settled %d (more %v), %v; want 1 (the other was deleted)", n, more, err)
	}
	if st := storedStatus(t, s, ids[0]); st != "done" {
		t.Fatalf("stored status after settling = %s", st)
	}
	if st := storedStatus(t, s, ids[1]); st != "deleted" {
		t.Fatalf("deleted one-shot stored as %s", st)
	}
	got, err := s.GetTarget(ctx, ids[0])
	if err != nil || got.Status != domain.StatusDone || !got.UpdatedAt.Equal(now) {
		t.Fatalf("settled target: %s updated %v, %v; want done at the claim's time %v", got.Status, got.UpdatedAt, err, now)
	}
}

// TestPauseWaitsForAOneShotsClaim: a pause that arrives while a claim
// holds the one-shot's queue entry waits for it and then finds the target
// done; a claim that arrives while a pause holds the entry skips it.
func TestPauseWaitsForAOneShotsClaim(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ids, err := s.CreateTargets(ctx, []domain.Target{oneShot(t, "a", now.Add(-time.Minute)), oneShot(t, "b", now.Add(-time.Minute))})
	if err != nil {
		t.Fatal(err)
	}
	pause := func(id int64) error {
		_, err := s.UpdateTarget(ctx, id, func(t domain.Target) (domain.Target, error) { return t.Pause(now) })
		return err
	}

	// 1. The claim holds both entries; the pause of the first waits.
	claim, err := s.BeginClaim(ctx, now, 10, domain.Planner{}, domain.ClaimCursor{})
	if err != nil || claim == nil || claim.Targets() != 2 {
		t.Fatalf("begin claim: %v, %v", claim, err)
	}
	defer claim.Rollback() // a no-op after Finish; else it frees the waiting pause
	paused := make(chan error, 1)
	go func() { paused <- pause(ids[0]) }()
	waitForLockWait(t, s, `%FROM target_due WHERE next_run_at = % FOR UPDATE%`)
	if _, err := claim.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-paused:
		if !errors.Is(err, domain.ErrConflict) {
			t.Fatalf("pause during the claim: %v; want a conflict (it fired)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pause still waiting 10s after the claim committed")
	}
	if st := storedStatus(t, s, ids[0]); st != "active" {
		t.Fatalf("stored status %s, want active (fired, not yet settled)", st)
	}

	// 2. A pause holds a queued one-shot's entry (its change is running);
	// a claim then skips it, and after the pause there is nothing to claim.
	ids2, err := s.CreateTargets(ctx, []domain.Target{oneShot(t, "c", now.Add(-time.Minute))})
	if err != nil {
		t.Fatal(err)
	}
	inChange, release := make(chan struct{}), make(chan struct{})
	go func() {
		_, err := s.UpdateTarget(ctx, ids2[0], func(t domain.Target) (domain.Target, error) {
			close(inChange)
			<-release
			return t.Pause(now)
		})
		paused <- err
	}()
	<-inChange
	if res, err := s.ClaimDue(ctx, now, 10, domain.Planner{}); err != nil || res.Targets != 0 {
		t.Fatalf("claim while a pause holds the entry: %+v, %v; want nothing", res, err)
	}
	close(release)
	if err := <-paused; err != nil {
		t.Fatal(err)
	}
	if res, err := s.ClaimDue(ctx, now, 10, domain.Planner{}); err != nil || res.Targets != 0 {
		t.Fatalf("claim after the pause: %+v, %v; want nothing", res, err)
	}
	if got, err := s.GetTarget(ctx, ids2[0]); err != nil || got.Status != domain.StatusPaused {
		t.Fatalf("paused one-shot: %s, %v", got.Status, err)
	}
}

// waitForLockWait waits until a statement LIKE pattern has run for a
// second or more on this test's database (information_schema.PROCESSLIST):
// a primary-key read that long is waiting for a lock. (INNODB_TRX does not
// always list a read that waits while the optimizer reads a const row.)
func waitForLockWait(t *testing.T, s *MySQLStore, pattern string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var n int
		if err := s.DB().QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND INFO LIKE ? AND TIME >= 1`, pattern).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no statement like %q waiting within 15s", pattern)
		}
		time.Sleep(20 * time.Millisecond) // polling the server's process list
	}
}

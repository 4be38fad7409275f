package adapters

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

func TestClaimOneShotsAndRelayQueries(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var in []domain.Target
	for i := 0; i < 25; i++ {
		in = append(in, oneShot(t, fmt.Sprintf("r%d", i%5), now.Add(time.Duration(i-20)*time.Second)))
	}
	if _, err := s.CreateTargets(ctx, in); err != nil {
		t.Fatal(err)
	}
	planner := domain.Planner{Policy: domain.MissedPolicy{Collapse: true}}
	total := 0
	for {
		res, err := s.ClaimDue(ctx, now, 7, planner)
		if err != nil {
			t.Fatal(err)
		}
		if res.Inserted != res.Targets {
			t.Fatalf("claim: %+v", res)
		}
		total += res.Targets
		if res.Targets < 7 {
			break
		}
	}
	if total != 21 { // due at or before now: offsets -20..0
		t.Fatalf("claimed %d, want 21", total)
	}
	backlog, err := s.Backlog(ctx)
	if err != nil || backlog != 21 {
		t.Fatalf("backlog = %d, %v", backlog, err)
	}
	end, err := s.CommittedUpTo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Unpublished(ctx, 0, end, 10)
	if err != nil || len(first) != 10 {
		t.Fatalf("unpublished = %d, %v", len(first), err)
	}
	for i := 1; i < len(first); i++ {
		if first[i].Sequence <= first[i-1].Sequence || !first[i].DueAt.After(first[i-1].DueAt) {
			t.Fatalf("not in outbox order: %+v", first)
		}
	}
	if first[0].Channel != domain.ChannelSim || string(first[0].Params) != `{"n":1}` || first[0].TemplateID != "tmpl" {
		t.Fatalf("row: %+v", first[0])
	}
	if bounded, err := s.Unpublished(ctx, 0, first[4].Sequence, 10); err != nil || len(bounded) != 5 {
		t.Fatalf("unpublished up to %d = %d rows, %v; want 5", first[4].Sequence, len(bounded), err)
	}
	rest, err := s.Unpublished(ctx, first[len(first)-1].Sequence, end, 100)
	if err != nil || len(rest) != 11 {
		t.Fatalf("unpublished after cursor = %d, %v", len(rest), err)
	}
	if err := s.MarkPublished(ctx, first[len(first)-1].Sequence, now); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkPublished(ctx, first[0].Sequence, now); err != nil { // a late former holder
		t.Fatal(err)
	}
	if upTo, err := s.PublishedUpTo(ctx); err != nil || upTo != first[len(first)-1].Sequence {
		t.Fatalf("cursor = %d, %v; want %d (it never moves back)", upTo, err, first[len(first)-1].Sequence)
	}
	if backlog, _ := s.Backlog(ctx); backlog != 11 {
		t.Fatalf("backlog after mark = %d", backlog)
	}
	// Rows are created at now: a cut-off before now deletes nothing.
	if n, err := s.PurgePublished(ctx, now, 100); err != nil || n != 0 {
		t.Fatalf("purged %d, %v; want 0", n, err)
	}
	// Nor is a row purged before its one-shot is settled.
	if n, err := s.PurgePublished(ctx, now.Add(time.Second), 100); err != nil || n != 0 {
		t.Fatalf("purged %d before settling, %v; want 0", n, err)
	}
	if n, more, err := s.SettleOneShots(ctx, 15); err != nil || n != 15 || !more {
		t.Fatalf("settled %d (more %v), %v; want 15 and more", n, more, err)
	}
	if n, more, err := s.SettleOneShots(ctx, 15); err != nil || n != 6 || more {
		t.Fatalf("settled %d (more %v), %v; want the last 6", n, more, err)
	}
	if n, more, err := s.SettleOneShots(ctx, 15); err != nil || n != 0 || more {
		t.Fatalf("settled again %d (more %v), %v; want nothing", n, more, err)
	}
	// The row at the cursor stays.
	if n, err := s.PurgePublished(ctx, now.Add(time.Second), 100); err != nil || n != 9 {
		t.Fatalf("purged %d, %v; want 9", n, err)
	}
	if n, err := s.PurgePublished(ctx, now.Add(time.Second), 100); err != nil || n != 0 {
		t.Fatalf("purged again %d, %v; want 0", n, err)
	}
	var done int
	_ = s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM notification_targets WHERE status = 'done'`).Scan(&done)
	if done != 21 {
		t.Fatalf("done targets = %d", done)
	}
}

// TestDuplicateOccurrenceIsImpossible simulates a second scanner that
// claims the same occurrence (e.g. a paused lock holder acting on an old
// snapshot): the unique key keeps one outbox row.
// Both claim paths: the entry alone (one_shot = 1) and through the target
// (one_shot = 0).
func TestDuplicateOccurrenceIsImpossible(t *testing.T) {
	t.Parallel()
	for _, oneShotEntry := range []bool{true, false} {
		t.Run(fmt.Sprintf("one_shot=%v", oneShotEntry), func(t *testing.T) {
			t.Parallel()
			duplicateOccurrence(t, oneShotEntry)
		})
	}
}

func duplicateOccurrence(t *testing.T, oneShotEntry bool) {
	s := openStore(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ids, err := s.CreateTargets(ctx, []domain.Target{oneShot(t, "r", now)})
	if err != nil {
		t.Fatal(err)
	}
	planner := domain.Planner{}
	if res, err := s.ClaimDue(ctx, now, 10, planner); err != nil || res.Inserted != 1 {
		t.Fatalf("first claim: %+v, %v", res, err)
	}
	// Make the target due again as a stale scanner would see it.
	if _, err := s.DB().ExecContext(ctx, `UPDATE notification_targets SET status = 'active' WHERE id = ?`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO target_due (next_run_at, target_id, one_shot) VALUES (?, ?, ?)`, now, ids[0], oneShotEntry); err != nil {
		t.Fatal(err)
	}
	// A new target in the same batch: its row is written, the duplicate's
	// is not (the plain INSERT fails on the duplicate, the merging one
	// writes the new row only).
	if _, err := s.CreateTargets(ctx, []domain.Target{oneShot(t, "r2", now)}); err != nil {
		t.Fatal(err)
	}
	res, err := s.ClaimDue(ctx, now, 10, planner)
	if err != nil || res.Targets != 2 || res.Inserted != 1 {
		t.Fatalf("second claim: %+v, %v; want 2 targets, 1 row", res, err)
	}
	var n, first int
	_ = s.DB().QueryRowContext(ctx, `SELECT COUNT(*), SUM(target_id = ?) FROM outbox`, ids[0]).Scan(&n, &first)
	if n != 2 || first != 1 {
		t.Fatalf("outbox rows = %d (%d of the first target), want 2 (1)", n, first)
	}
}

// TestClaimManyDistinctNextRuns exercises the CASE update path: cron
// targets in many zones advance to different next runs in one batch.
func TestClaimManyDistinctNextRuns(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	created := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	zones := []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Asia/Kolkata", "Australia/Sydney",
		"America/Los_Angeles", "Europe/London", "America/Sao_Paulo", "Africa/Cairo", "Pacific/Auckland", "Asia/Kathmandu"}
	var in []domain.Target
	for i, z := range zones {
		in = append(in, cronTarget(t, fmt.Sprintf("r%d", i), "0 9 * * *", z, created))
	}
	ids, err := s.CreateTargets(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	now := created.Add(36 * time.Hour)
	res, err := s.ClaimDue(ctx, now, 100, domain.Planner{Policy: domain.MissedPolicy{Collapse: true}})
	if err != nil || res.Targets != len(zones) || res.Inserted != len(zones) {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	for i, id := range ids {
		got, err := s.GetTarget(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := in[i].Schedule.Next(now)
		if !got.NextRunAt.Equal(want) || got.Status != domain.StatusActive {
			t.Errorf("%s: next %s status %s, want %s active", zones[i], got.NextRunAt, got.Status, want)
		}
	}
}

// TestOverlappingClaims begins a second claim while the first is open (as
// a scan does): they take disjoint targets in (next_run_at, id) order, and
// finishing them in order gives the first claim's targets the lower outbox
// ids.
func TestOverlappingClaims(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var in []domain.Target
	for i := 0; i < 10; i++ {
		in = append(in, oneShot(t, "r", now.Add(-time.Duration(i)*time.Second)))
	}
	if _, err := s.CreateTargets(ctx, in); err != nil {
		t.Fatal(err)
	}
	first, err := s.BeginClaim(ctx, now, 4, domain.Planner{}, domain.ClaimCursor{})
	if err != nil || first == nil || first.Targets() != 4 {
		t.Fatalf("first claim: %v, %v", first, err)
	}
	second, err := s.BeginClaim(ctx, now, 4, domain.Planner{}, first.Cursor())
	if err != nil || second == nil || second.Targets() != 4 {
		t.Fatalf("second claim: %v, %v", second, err)
	}
	if !second.Cursor().NextRunAt.After(first.Cursor().NextRunAt) {
		t.Fatalf("cursors %+v then %+v are not in order", first.Cursor(), second.Cursor())
	}
	for _, c := range []interface {
		Finish(context.Context) (domain.ClaimResult, error)
	}{first, second} {
		if res, err := c.Finish(ctx); err != nil || res.Inserted != 4 {
			t.Fatalf("finish: %+v, %v", res, err)
		}
	}
	notes, err := s.Unpublished(ctx, 0, math.MaxUint64, 100)
	if err != nil || len(notes) != 8 {
		t.Fatalf("outbox: %d rows, %v", len(notes), err)
	}
	for i := 1; i < len(notes); i++ {
		if notes[i].OccurrenceAt.Before(notes[i-1].OccurrenceAt) {
			t.Fatalf("outbox order does not follow due order at %d: %v then %v", i, notes[i-1].OccurrenceAt, notes[i].OccurrenceAt)
		}
	}
	// The two left over are claimed from the start.
	if res, err := s.ClaimDue(ctx, now, 10, domain.Planner{}); err != nil || res.Targets != 2 {
		t.Fatalf("rest: %+v, %v", res, err)
	}
}

// TestClaimDropsStaleQueueEntries: on the path that reads the target
// (entries with one_shot = 0, as cron targets have), queue entries that
// no longer match their target are dropped without an outbox row (target
// deleted, paused, or due later, which gets its right entry), and the
// entry of a target another transaction holds stays for a later claim.
func TestClaimDropsStaleQueueEntries(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var in []domain.Target
	for _, r := range []string{"due", "gone", "paused", "later", "held"} {
		in = append(in, oneShot(t, r, now.Add(-time.Minute)))
	}
	ids, err := s.CreateTargets(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Hour)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`UPDATE target_due SET one_shot = 0`, nil},
		{`DELETE FROM notification_targets WHERE id = ?`, []any{ids[1]}},
		{`UPDATE notification_targets SET status = 'paused' WHERE id = ?`, []any{ids[2]}},
		{`UPDATE notification_targets SET next_run_at = ? WHERE id = ?`, []any{later, ids[3]}},
	} {
		if _, err := s.DB().ExecContext(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	// Another transaction (an API request) holds the last target.
	held, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Rollback() }()
	var one int64
	if err := held.QueryRowContext(ctx, `SELECT id FROM notification_targets WHERE id = ? FOR UPDATE`, ids[4]).Scan(&one); err != nil {
		t.Fatal(err)
	}
	res, err := s.ClaimDue(ctx, now, 10, domain.Planner{})
	if err != nil || res.Targets != 1 || res.Inserted != 1 {
		t.Fatalf("claim: %+v, %v; want the one due target", res, err)
	}
	var target int64
	if err := s.DB().QueryRowContext(ctx, `SELECT target_id FROM outbox`).Scan(&target); err != nil || target != ids[0] {
		t.Fatalf("outbox row of target %d (%v), want %d", target, err, ids[0])
	}
	queue := dueQueue(t, s)
	if len(queue) != 2 || !queue[ids[3]].Equal(later) || !queue[ids[4]].Equal(now.Add(-time.Minute)) {
		t.Fatalf("queue after the claim = %v, want %d at %v and %d kept", queue, ids[3], later, ids[4])
	}
	// Released, the held target is claimed next time.
	_ = held.Rollback()
	if res, err := s.ClaimDue(ctx, now, 10, domain.Planner{}); err != nil || res.Inserted != 1 {
		t.Fatalf("claim after release: %+v, %v", res, err)
	}
}

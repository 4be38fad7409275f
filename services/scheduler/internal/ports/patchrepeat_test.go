package ports_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// fenceMark is what a change stamps on a target besides its version.
type fenceMark struct {
	version uint64
	at      sql.NullTime
	outbox  uint64
	updated time.Time
}

func (s *server) fenceMark(t *testing.T, id int64) fenceMark {
	t.Helper()
	var m fenceMark
	err := s.store.DB().QueryRow(`SELECT version, fenced_at, fence_outbox_id, updated_at FROM notification_targets WHERE id = ?`, id).
		Scan(&m.version, &m.at, &m.outbox, &m.updated)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPatchRepeatIsNoOp: a PATCH repeated as it was (or one giving what
// the target already holds) answers 200 with the target as it is stored
// and changes nothing: the version, fenced_at, fence_outbox_id, updated_at
// and next run stay, so an occurrence claimed since the first PATCH, under
// the new schedule, is not fenced. A PATCH that changes something still
// raises the version.
func TestPatchRepeatIsNoOp(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx := context.Background()
	r := s.call(t, "POST", "/v1/targets", `{"recipient_id":"u1","channel":"inbox","template_id":"t1","params":{"a":1},"cron":"0 9 * * *"}`)
	if r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	id := decodeTarget(t, r).ID
	const change = `{"cron":"*/5 * * * *","params":{"b":2}}`
	r, p := s.patch(t, id, change)
	first := time.Date(2026, 3, 7, 12, 5, 0, 0, time.UTC)
	if r.code != 200 || p.Version != 2 || !p.NextRunAt.Equal(first) {
		t.Fatalf("patch: %d %s", r.code, r.body)
	}
	// The new schedule's first occurrence is claimed; time passes.
	if _, err := s.store.ClaimDue(ctx, first, 10, domain.Planner{}); err != nil {
		t.Fatal(err)
	}
	s.clock.Add(6 * time.Minute) // 12:06, after the claim
	before := s.fenceMark(t, id)
	g := s.call(t, "GET", fmt.Sprintf("/v1/targets/%d", id), "")
	for i := 0; i < 2; i++ {
		r, p = s.patch(t, id, change)
		if r.code != 200 || p.Version != 2 || !bytes.Equal(r.body, g.body) {
			t.Fatalf("repeat %d: %d %s, want 200 with the stored target %s", i+1, r.code, r.body, g.body)
		}
		if after := s.fenceMark(t, id); after != before {
			t.Fatalf("repeat %d changed the target's fence: %+v, was %+v", i+1, after, before)
		}
	}
	ns := s.unpublished(t, id)
	if len(ns) != 1 || !ns[0].OccurrenceAt.Equal(first) || ns[0].TargetVersion != 2 {
		t.Fatalf("outbox: %+v, want the 12:05 occurrence at the target's version 2 (not fenced)", ns)
	}

	// A one-shot: the same due_at twice is one change.
	const due = `{"due_at":"2026-03-10T00:00:00.000000001+01:00"}`
	if r, p = s.patch(t, id, due); r.code != 200 || p.Version != 3 {
		t.Fatalf("patch due_at: %d %s", r.code, r.body)
	}
	if r, p = s.patch(t, id, due); r.code != 200 || p.Version != 3 {
		t.Fatalf("repeat patch due_at: %d %s, want version 3", r.code, r.body)
	}
	// A real change still raises the version.
	if r, p = s.patch(t, id, `{"params":{"b":3}}`); r.code != 200 || p.Version != 4 || string(p.Params) != `{"b":3}` {
		t.Fatalf("patch params: %d %s, want version 4", r.code, r.body)
	}
}

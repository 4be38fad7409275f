package ports_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/notiflow/notiflow/services/scheduler/internal/ports"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// queued returns target id's due-queue entries (next_run_at).
func (s *server) queued(t *testing.T, id int64) map[time.Time]bool {
	t.Helper()
	rows, err := s.store.DB().Query(`SELECT next_run_at FROM target_due WHERE target_id = ?`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[time.Time]bool{}
	for rows.Next() {
		var at time.Time
		if err := rows.Scan(&at); err != nil {
			t.Fatal(err)
		}
		out[at.UTC()] = true
	}
	return out
}

type patchedJSON struct {
	targetJSON
	Version uint64 `json:"version"`
}

func (s *server) patch(t *testing.T, id int64, body string) (response, patchedJSON) {
	t.Helper()
	r := s.call(t, "PATCH", fmt.Sprintf("/v1/targets/%d", id), body)
	var p patchedJSON
	if r.code == 200 {
		p.targetJSON = decodeTarget(t, r)
		p.Version = decodeVersion(t, r)
	}
	return r, p
}

func decodeVersion(t *testing.T, r response) uint64 {
	t.Helper()
	var v struct {
		Version uint64 `json:"version"`
	}
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatal(err)
	}
	return v.Version
}

// TestPatchReschedules: PATCH keeps the id, raises the version, moves the
// due-queue entry to the first run of the new schedule (carrying the new
// version), and what a claim then writes carries that version; a paused
// target stays paused and unqueued; a target that is done cannot be
// patched.
func TestPatchReschedules(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx := context.Background()
	r := s.call(t, "POST", "/v1/targets", `{"recipient_id":"u1","channel":"inbox","template_id":"t1","params":{"a":1},"cron":"0 9 * * *"}`)
	if r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	created := decodeTarget(t, r)
	if v := decodeVersion(t, r); v != 1 {
		t.Fatalf("created with version %d, want 1", v)
	}

	// New cron and zone, new params: 13:30 in Paris (UTC+1 in March) is
	// 12:30Z, half an hour after the clock's now.
	r, p := s.patch(t, created.ID, `{"cron":"30 13 * * *","time_zone":"Europe/Paris","params":{"b":2}}`)
	wantNext := time.Date(2026, 3, 7, 12, 30, 0, 0, time.UTC)
	if r.code != 200 || p.ID != created.ID || p.Cron != "30 13 * * *" || p.TimeZone != "Europe/Paris" ||
		string(p.Params) != `{"b":2}` || !p.NextRunAt.Equal(wantNext) || p.Status != "active" || p.Version != 2 || p.Recipient != "u1" {
		t.Fatalf("patch cron: %d %s", r.code, r.body)
	}
	if q := s.queued(t, created.ID); len(q) != 1 || !q[wantNext] {
		t.Fatalf("queue after the cron patch: %v, want {%s}", q, wantNext)
	}
	// The time zone alone moves the cron to another zone.
	r, p = s.patch(t, created.ID, `{"time_zone":"UTC"}`)
	if wantNext = time.Date(2026, 3, 7, 13, 30, 0, 0, time.UTC); r.code != 200 || !p.NextRunAt.Equal(wantNext) || p.Version != 3 {
		t.Fatalf("patch zone: %d %s", r.code, r.body)
	}
	// due_at makes it a one-shot.
	due := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	r, p = s.patch(t, created.ID, `{"due_at":"2026-03-10T00:00:00Z"}`)
	if r.code != 200 || p.Cron != "" || p.TimeZone != "" || p.DueAt == nil || !p.DueAt.Equal(due) || !p.NextRunAt.Equal(due) || p.Version != 4 {
		t.Fatalf("patch due_at: %d %s", r.code, r.body)
	}
	if q := s.queued(t, created.ID); len(q) != 1 || !q[due] {
		t.Fatalf("queue after the due_at patch: %v", q)
	}
	// GET shows the same.
	if g := s.call(t, "GET", fmt.Sprintf("/v1/targets/%d", created.ID), ""); g.code != 200 || decodeVersion(t, g) != 4 || decodeTarget(t, g).DueAt == nil {
		t.Fatalf("get after patch: %d %s", g.code, g.body)
	}
	// A claim at the new time writes the occurrence, which the relay
	// publishes with the version it was claimed under.
	if _, err := s.store.ClaimDue(ctx, due, 10, domain.Planner{}); err != nil {
		t.Fatal(err)
	}
	ns := s.unpublished(t, created.ID)
	if len(ns) != 1 || !ns[0].OccurrenceAt.Equal(due) || ns[0].TargetVersion != 4 {
		t.Fatalf("outbox: %+v, want one occurrence at %s of version 4", ns, due)
	}
	// It fired: done, no more patches.
	if r, _ := s.patch(t, created.ID, `{"params":{}}`); r.code != 409 || r.errMsg() != "cannot change a target that is done" {
		t.Fatalf("patch a fired one-shot: %d %s", r.code, r.body)
	}

	// A paused target stays paused, with no queue entry.
	r = s.call(t, "POST", "/v1/targets", `{"recipient_id":"u2","channel":"webhook","webhook_url":"https://example.com/a","template_id":"t1","cron":"0 9 * * *"}`)
	paused := decodeTarget(t, r)
	if r := s.call(t, "POST", fmt.Sprintf("/v1/targets/%d/pause", paused.ID), ""); r.code != 200 {
		t.Fatalf("pause: %d %s", r.code, r.body)
	}
	r, p = s.patch(t, paused.ID, `{"webhook_url":"https://example.com/b","template_id":"t2"}`)
	if r.code != 200 || p.Status != "paused" || p.Webhook != "https://example.com/b" || p.Version != 3 {
		t.Fatalf("patch a paused target: %d %s", r.code, r.body)
	}
	if q := s.queued(t, paused.ID); len(q) != 0 {
		t.Fatalf("a paused target was queued by a patch: %v", q)
	}
}

// TestPatchRejects: bad input gets a 4xx naming the field and changes
// nothing.
func TestPatchRejects(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	r := s.call(t, "POST", "/v1/targets", `{"recipient_id":"u1","channel":"inbox","template_id":"t1","cron":"0 9 * * *"}`)
	id := decodeTarget(t, r).ID
	path := fmt.Sprintf("/v1/targets/%d", id)
	tests := []struct {
		give     string
		wantCode int
		wantMsg  string
	}{
		{`{"recipient_id":"u2"}`, 400, "recipient_id: cannot be changed (create a new target)"},
		{`{"channel":"sim"}`, 400, "channel: cannot be changed (create a new target)"},
		{`{}`, 400, "body: give at least one of webhook_url, template_id, params, due_at, cron, time_zone"},
		{`{"cron":"61 * * * *"}`, 400, ""},
		{`{"cron":"0 9 * * *","due_at":"2026-03-10T00:00:00Z"}`, 400, "schedule: give either due_at or cron, not both"},
		{`{"due_at":"tomorrow"}`, 400, "due_at: must be an RFC 3339 time such as 2026-03-08T09:00:00Z"},
		{`{"time_zone":"Mars/Olympus"}`, 400, ""},
		{`{"webhook_url":"https://example.com/h"}`, 400, "webhook_url: is only allowed for channel webhook"},
		{`{"params":[1]}`, 400, "params: must be a JSON object"},
		{`{"template_id":""}`, 400, "template_id: is required"},
		{`{"nope":1}`, 400, ""},
	}
	for _, tt := range tests {
		r := s.call(t, "PATCH", path, tt.give)
		if r.code != tt.wantCode || (tt.wantMsg != "" && r.errMsg() != tt.wantMsg) || r.errMsg() == "" {
			t.Errorf("PATCH %s: %d %s, want %d %q", tt.give, r.code, r.body, tt.wantCode, tt.wantMsg)
		}
	}
	if r := s.call(t, "PATCH", "/v1/targets/999999999", `{"params":{}}`); r.code != 404 {
		t.Errorf("PATCH a missing target: %d %s", r.code, r.body)
	}
	if r := s.call(t, "PATCH", "/v1/targets/x", `{"params":{}}`); r.code != 400 || r.errMsg() != "id: must be a positive integer" {
		t.Errorf("PATCH a bad id: %d %s", r.code, r.body)
	}
	if r := s.do(t, "PATCH", path, "", "application/json", `{"params":{}}`); r.code != 401 {
		t.Errorf("PATCH without the token: %d %s", r.code, r.body)
	}
	g := s.call(t, "GET", path, "")
	if decodeVersion(t, g) != 1 || decodeTarget(t, g).Cron != "0 9 * * *" {
		t.Errorf("a rejected patch changed the target: %s", g.body)
	}
}

// unpublished returns the outbox rows of target id as the relay reads them.
func (s *server) unpublished(t *testing.T, id int64) []domain.Notification {
	t.Helper()
	ns, err := s.store.Unpublished(context.Background(), 0, math.MaxInt64, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []domain.Notification
	for _, n := range ns {
		if n.TargetID == id {
			out = append(out, n)
		}
	}
	return out
}

// TestPatchFencesClaimedOccurrences: an occurrence claimed before a
// change is published with the version it was claimed under, below the
// target's new version (the dispatcher fences it); the next occurrence,
// claimed after the change under the new schedule, carries the new
// version.
func TestPatchFencesClaimedOccurrences(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx := context.Background()
	r := s.call(t, "POST", "/v1/targets", `{"recipient_id":"u1","channel":"inbox","template_id":"t1","cron":"* * * * *"}`)
	id := decodeTarget(t, r).ID
	first := time.Date(2026, 3, 7, 12, 1, 0, 0, time.UTC)
	if _, err := s.store.ClaimDue(ctx, first, 10, domain.Planner{}); err != nil {
		t.Fatal(err)
	}
	s.clock.Add(90 * time.Second) // 12:01:30, after the claim
	// A one-shot at the time of the occurrence already claimed would never
	// fire: refused.
	if r, _ := s.patch(t, id, `{"due_at":"2026-03-07T12:01:00Z"}`); r.code != 409 ||
		r.errMsg() != "due_at: the target already has an occurrence at 2026-03-07T12:01:00Z; give another time" {
		t.Fatalf("patch to the claimed occurrence's time: %d %s", r.code, r.body)
	}
	r, p := s.patch(t, id, `{"cron":"*/5 * * * *"}`)
	if r.code != 200 || p.Version != 2 || !p.NextRunAt.Equal(time.Date(2026, 3, 7, 12, 5, 0, 0, time.UTC)) {
		t.Fatalf("patch: %d %s", r.code, r.body)
	}
	if _, err := s.store.ClaimDue(ctx, p.NextRunAt, 10, domain.Planner{}); err != nil {
		t.Fatal(err)
	}
	ns := s.unpublished(t, id)
	if len(ns) != 2 || !ns[0].OccurrenceAt.Equal(first) || ns[0].TargetVersion != 1 ||
		!ns[1].OccurrenceAt.Equal(p.NextRunAt) || ns[1].TargetVersion != 2 {
		t.Fatalf("outbox: %+v, want the 12:01 occurrence at version 1 and the 12:05 one at version 2", ns)
	}
	// A second change fences both.
	if r := s.call(t, "POST", fmt.Sprintf("/v1/targets/%d/pause", id), ""); r.code != 200 || decodeVersion(t, r) != 3 {
		t.Fatalf("pause: %d %s", r.code, r.body)
	}
	for _, n := range s.unpublished(t, id) {
		if n.TargetVersion >= 3 {
			t.Errorf("occurrence %s claimed before the pause has version %d, not below 3", n.OccurrenceAt, n.TargetVersion)
		}
	}
}

// TestOpenAPIDocumentsPatch: the document describes PATCH and the 503 of
// a change whose fence did not settle.
func TestOpenAPIDocumentsPatch(t *testing.T) {
	t.Parallel()
	doc := string(ports.OpenAPI())
	for _, want := range []string{"operationId: patchTarget", "TargetPatch:", "FenceNotSettled:", `"503": { $ref: "#/components/responses/FenceNotSettled" }`, "cancelled"} {
		if !strings.Contains(doc, want) {
			t.Errorf("openapi.yaml lacks %q", want)
		}
	}
}

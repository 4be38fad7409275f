package domain

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestAdvance(t *testing.T) {
	t.Parallel()
	hourlyNY := mustCron(t, "0 * * * *", "America/New_York")
	nineNY := mustCron(t, "0 9 * * *", "America/New_York")
	once := OneShot(utc("2026-03-08T06:00:00Z"))
	tests := []struct {
		name     string
		sched    Schedule
		next     string
		now      string
		policy   MissedPolicy
		wantOcc  []string
		wantNext string
		want     Status
		wantTrun bool
	}{
		{
			name: "one-shot due fires once and is done", sched: once,
			next: "2026-03-08T06:00:00Z", now: "2026-03-08T06:00:00.5Z",
			wantOcc: []string{"2026-03-08T06:00:00Z"}, wantNext: "2026-03-08T06:00:00Z", want: StatusDone,
		},
		{
			name: "one-shot not yet due yields nothing", sched: once,
			next: "2026-03-08T06:00:00Z", now: "2026-03-08T05:59:59Z",
			wantNext: "2026-03-08T06:00:00Z", want: StatusActive,
		},
		{
			name: "cron on time moves to the next slot", sched: nineNY,
			next: "2026-03-07T14:00:00Z", now: "2026-03-07T14:00:01Z", policy: MissedPolicy{Collapse: true},
			wantOcc: []string{"2026-03-07T14:00:00Z"}, wantNext: "2026-03-08T13:00:00Z", want: StatusActive,
		},
		{
			name: "missed hourly slots collapse into the first one", sched: hourlyNY,
			next: "2026-03-08T05:00:00Z", now: "2026-03-08T09:30:00Z", policy: MissedPolicy{Collapse: true},
			wantOcc: []string{"2026-03-08T05:00:00Z"}, wantNext: "2026-03-08T10:00:00Z", want: StatusActive,
		},
		{
			name: "missed hourly slots across the DST gap, one each", sched: hourlyNY,
			next: "2026-03-08T05:00:00Z", now: "2026-03-08T08:00:00Z", policy: MissedPolicy{MaxCatchUp: 10},
			wantOcc:  []string{"2026-03-08T05:00:00Z", "2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"},
			wantNext: "2026-03-08T09:00:00Z", want: StatusActive,
		},
		{
			name: "catch-up is capped", sched: hourlyNY,
			next: "2026-03-08T05:00:00Z", now: "2026-03-08T09:30:00Z", policy: MissedPolicy{MaxCatchUp: 2},
			wantOcc:  []string{"2026-03-08T05:00:00Z", "2026-03-08T06:00:00Z"},
			wantNext: "2026-03-08T10:00:00Z", want: StatusActive, wantTrun: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tg := Target{ID: 1, Schedule: tt.sched, NextRunAt: utc(tt.next), Status: StatusActive}
			got := tg.Advance(utc(tt.now), tt.policy)
			if len(got.Occurrences) != len(tt.wantOcc) {
				t.Fatalf("occurrences = %v, want %v", got.Occurrences, tt.wantOcc)
			}
			for i, w := range tt.wantOcc {
				if !got.Occurrences[i].Equal(utc(w)) {
					t.Errorf("occurrence %d = %s, want %s", i, got.Occurrences[i].Format(time.RFC3339), w)
				}
			}
			if !got.NextRunAt.Equal(utc(tt.wantNext)) || got.Status != tt.want || got.Truncated != tt.wantTrun {
				t.Errorf("next, status, truncated = %s, %s, %v; want %s, %s, %v",
					got.NextRunAt.Format(time.RFC3339), got.Status, got.Truncated, tt.wantNext, tt.want, tt.wantTrun)
			}
		})
	}
}

// TestAdvanceOverTicks walks a clock tick by tick over two days around the
// New York DST change and checks that a daily target fires exactly once a
// day at 09:00 local, whatever the tick interval.
func TestAdvanceOverTicks(t *testing.T) {
	t.Parallel()
	s := mustCron(t, "0 9 * * *", "America/New_York")
	now := utc("2026-03-06T12:00:00Z")
	tg := Target{ID: 1, Schedule: s, NextRunAt: s.FirstRun(now), Status: StatusActive}
	var fired []time.Time
	for end := utc("2026-03-10T00:00:00Z"); now.Before(end); now = now.Add(7 * time.Minute) {
		a := tg.Advance(now, MissedPolicy{Collapse: true})
		fired = append(fired, a.Occurrences...)
		tg.NextRunAt, tg.Status = a.NextRunAt, a.Status
	}
	want := []string{"2026-03-06T14:00:00Z", "2026-03-07T14:00:00Z", "2026-03-08T13:00:00Z", "2026-03-09T13:00:00Z"}
	if len(fired) != len(want) {
		t.Fatalf("fired %v, want %v", fired, want)
	}
	for i := range want {
		if !fired[i].Equal(utc(want[i])) {
			t.Errorf("fired[%d] = %s, want %s", i, fired[i].Format(time.RFC3339), want[i])
		}
	}
}

func TestNewTargetValidation(t *testing.T) {
	t.Parallel()
	now := utc("2026-01-01T00:00:00Z")
	daily := mustCron(t, "@daily", "UTC")
	lim := Limits{MaxParamsBytes: 32}
	type give struct {
		rcpt, ch, url, tmpl, params string
		sched                       Schedule
	}
	ok := give{rcpt: "u1", ch: "inbox", tmpl: "t1", params: `{"a": 1}`, sched: daily}
	with := func(f func(*give)) give { g := ok; f(&g); return g }
	tests := []struct {
		name string
		give give
		want string
	}{
		{"ok", ok, ""},
		{"missing recipient", with(func(g *give) { g.rcpt = " " }), "recipient_id: is required"},
		{"missing template", with(func(g *give) { g.tmpl = "" }), "template_id: is required"},
		{"bad channel", with(func(g *give) { g.ch = "sms" }), `channel: unknown channel "sms"`},
		{"webhook without url", with(func(g *give) { g.ch = "webhook" }), "webhook_url: is required"},
		{"webhook ftp url", with(func(g *give) { g.ch, g.url = "webhook", "ftp://x/y" }), "webhook_url: must be an absolute http or https URL"},
		{"webhook relative url", with(func(g *give) { g.ch, g.url = "webhook", "/hook" }), "webhook_url: must be an absolute http or https URL"},
		{"url on inbox", with(func(g *give) { g.url = "https://x" }), "webhook_url: is only allowed for channel webhook"},
		{"params array", with(func(g *give) { g.params = `[1]` }), "params: must be a JSON object"},
		{"params too big", with(func(g *give) { g.params = `{"k":"` + strings.Repeat("x", 40) + `"}` }), "params: 48 bytes exceed the limit of 32"},
		{"no schedule", with(func(g *give) { g.sched = Schedule{} }), "schedule: give either due_at or cron"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := tt.give
			tg, err := NewTarget(g.rcpt, Channel(g.ch), g.url, g.tmpl, []byte(g.params), g.sched, now, lim)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("NewTarget: %v", err)
				}
				if string(tg.Params) != `{"a":1}` || !tg.NextRunAt.Equal(utc("2026-01-02T00:00:00Z")) || tg.Status != StatusActive {
					t.Fatalf("got %+v", tg)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want a ValidationError containing %q", err, tt.want)
			}
		})
	}
}

func TestNotificationID(t *testing.T) {
	t.Parallel()
	created, at := utc("2026-01-01T00:00:00.000001Z"), utc("2026-03-08T13:00:00Z")
	for name, mk := range map[string]func(int64, time.Time, time.Time) string{
		"ordered": NotificationID, "hashed": HashedNotificationID,
	} {
		id := mk(42, created, at)
		if len(id) != 36 || id[14] != '8' || !strings.ContainsAny(id[19:20], "89ab") {
			t.Fatalf("%s: id %q is not a version 8 UUID", name, id)
		}
		if again := mk(42, created, at); again != id {
			t.Fatalf("%s: not deterministic: %s then %s", name, id, again)
		}
		seen := map[string]bool{id: true}
		for _, other := range []string{
			mk(43, created, at),
			mk(42+1<<32, created, at), // the same low 32 bits
			mk(42, created.Add(time.Microsecond), at),
			mk(42, created, at.Add(time.Microsecond)), // the same millisecond
		} {
			if seen[other] {
				t.Fatalf("%s: collision: %s", name, other)
			}
			seen[other] = true
		}
	}
}

// Ids sort by occurrence time, then by target id (its low 32 bits), as
// claims make them: the sink's unique index takes them in order.
func TestNotificationIDOrder(t *testing.T) {
	t.Parallel()
	created, at := utc("2026-01-01T00:00:00.000001Z"), utc("2026-03-08T13:00:00Z")
	var ids []string
	for _, occ := range []time.Time{at, at.Add(time.Millisecond), at.Add(time.Hour), at.AddDate(1, 0, 0)} {
		for _, target := range []int64{1, 2, 255, 256, 1<<14 - 1, 1 << 14, 1<<20 - 1, 1 << 20, 1<<28 + 5, 1<<32 - 1} {
			ids = append(ids, NotificationID(target, created, occ))
		}
	}
	if !slices.IsSorted(ids) {
		t.Fatalf("ids out of order:\n%s", strings.Join(ids, "\n"))
	}
	if got, want := NotificationID(42, created, at)[:13], fmt.Sprintf("%08x-%04x", at.UnixMilli()>>16, at.UnixMilli()&0xffff); got != want {
		t.Fatalf("id starts %s, want the occurrence's milliseconds %s", got, want)
	}
}

// The hashed id is the one outbox rows at or below
// outbox_relay.ordered_ids_after keep: it must not change.
func TestHashedNotificationIDUnchanged(t *testing.T) {
	t.Parallel()
	created, at := utc("2026-01-01T00:00:00.000001Z"), utc("2026-03-08T13:00:00Z")
	if got, want := HashedNotificationID(42, created, at), "0b5efa06-d300-8ea9-a720-88d99fc0d5dc"; got != want {
		t.Fatalf("hashed id %s, want %s", got, want)
	}
}

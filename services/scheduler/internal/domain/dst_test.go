package domain

import (
	"testing"
	"time"
)

// The DST transitions of 2026 the tests below cross:
//
//	America/New_York  spring forward 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z)
//	                  fall back      2026-11-01 02:00 EDT -> 01:00 EST (06:00Z)
//	Europe/Berlin     spring forward 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z)
//	                  fall back      2026-10-25 03:00 CEST -> 02:00 CET (01:00Z)
//	Australia/Sydney  fall back      2026-04-05 03:00 AEDT -> 02:00 AEST (04-04 16:00Z)
//	                  spring forward 2026-10-04 02:00 AEST -> 03:00 AEDT (10-03 16:00Z)

// TestScheduleDSTFixedTime checks the rule for schedules at fixed times of
// day: a wall time in the repeated hour fires once, at its first instant; a
// wall time in the skipped hour fires at the first instant after the gap.
func TestScheduleDSTFixedTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		expr string
		zone string
		from string
		want []string
	}{
		{
			name: "New York 01:30 on fall back fires once, at 01:30 EDT",
			expr: "30 1 * * *", zone: "America/New_York", from: "2026-10-31T12:00:00Z",
			want: []string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"},
		},
		{
			name: "New York 02:30 on spring forward fires at 03:00 EDT",
			expr: "30 2 * * *", zone: "America/New_York", from: "2026-03-07T12:00:00Z",
			want: []string{"2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"},
		},
		{
			name: "Berlin 02:30 on fall back fires once, at 02:30 CEST",
			expr: "30 2 * * *", zone: "Europe/Berlin", from: "2026-10-24T12:00:00Z",
			want: []string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"},
		},
		{
			name: "Berlin 02:30 on spring forward fires at 03:00 CEST",
			expr: "30 2 * * *", zone: "Europe/Berlin", from: "2026-03-28T12:00:00Z",
			want: []string{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"},
		},
		{
			name: "Sydney 02:30 on fall back fires once, at 02:30 AEDT",
			expr: "30 2 * * *", zone: "Australia/Sydney", from: "2026-04-04T00:00:00Z",
			want: []string{"2026-04-04T15:30:00Z", "2026-04-05T16:30:00Z"},
		},
		{
			name: "Sydney 02:30 on spring forward fires at 03:00 AEDT",
			expr: "30 2 * * *", zone: "Australia/Sydney", from: "2026-10-03T00:00:00Z",
			want: []string{"2026-10-03T16:00:00Z", "2026-10-04T15:30:00Z"},
		},
		{
			name: "several slots in the New York gap fire once, at 03:00 EDT",
			expr: "0,30 2 * * *", zone: "America/New_York", from: "2026-03-08T05:00:00Z",
			want: []string{"2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"},
		},
		{
			name: "a slot in the gap and one at its end fire once",
			expr: "30 2,3 * * *", zone: "Europe/Berlin", from: "2026-03-29T00:00:00Z",
			want: []string{"2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z", "2026-03-30T00:30:00Z"},
		},
		{
			name: "from the first instant of the repeated slot, the next is a day later",
			expr: "30 1 * * *", zone: "America/New_York", from: "2026-11-01T05:30:00Z",
			want: []string{"2026-11-02T06:30:00Z"},
		},
		{
			name: "from inside the second pass of the repeated hour, the slot does not fire again",
			expr: "30 1 * * *", zone: "America/New_York", from: "2026-11-01T06:10:00Z",
			want: []string{"2026-11-02T06:30:00Z"},
		},
		{
			name: "from the gap's end the skipped slot does not fire again",
			expr: "30 2 * * *", zone: "America/New_York", from: "2026-03-08T07:00:00Z",
			want: []string{"2026-03-09T06:30:00Z"},
		},
		{
			name: "@daily in a zone whose midnight is skipped (Santiago 2026-09-06) fires at 01:00",
			expr: "@daily", zone: "America/Santiago", from: "2026-09-05T12:00:00Z",
			want: []string{"2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := mustCron(t, tt.expr, tt.zone)
			got := nextN(s, utc(tt.from), len(tt.want))
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if !got[i].Equal(utc(tt.want[i])) {
					t.Fatalf("slot %d: got %v, want %v (all: %v)", i, got[i], tt.want[i], got)
				}
			}
		})
	}
}

// TestScheduleDSTIntervals checks the rule for schedules with a wildcard in
// the minute or hour field (@hourly, */15): they fire at every instant whose
// wall clock matches, so an every-15-minutes schedule fires every real 15
// minutes through both transitions and an hourly one every real hour.
func TestScheduleDSTIntervals(t *testing.T) {
	t.Parallel()
	transitions := []struct {
		zone string
		at   string // the transition instant
	}{
		{"America/New_York", "2026-03-08T07:00:00Z"},
		{"America/New_York", "2026-11-01T06:00:00Z"},
		{"Europe/Berlin", "2026-03-29T01:00:00Z"},
		{"Europe/Berlin", "2026-10-25T01:00:00Z"},
		{"Australia/Sydney", "2026-04-04T16:00:00Z"},
		{"Australia/Sydney", "2026-10-03T16:00:00Z"},
	}
	schedules := []struct {
		expr string
		step time.Duration
	}{
		{"*/15 * * * *", 15 * time.Minute},
		{"@hourly", time.Hour},
		{"* * * * *", time.Minute},
	}
	for _, tr := range transitions {
		for _, sc := range schedules {
			t.Run(tr.zone+" "+tr.at+" "+sc.expr, func(t *testing.T) {
				t.Parallel()
				s := mustCron(t, sc.expr, tr.zone)
				at := utc(tr.at)
				from := at.Add(-3 * time.Hour)
				n := int(6 * time.Hour / sc.step)
				got := nextN(s, from, n)
				if len(got) != n {
					t.Fatalf("got %d slots, want %d", len(got), n)
				}
				for i, g := range got {
					if want := from.Add(time.Duration(i+1) * sc.step); !g.Equal(want) {
						t.Fatalf("slot %d: got %v, want %v (every %v of real time)", i, g, want, sc.step)
					}
				}
			})
		}
	}
}

// TestAdvanceDSTFallBack checks the claim's catch-up through a fall-back:
// a daily 01:30 in New York claimed after both passes of 01:30 yields one
// occurrence, not two with different notification ids.
func TestAdvanceDSTFallBack(t *testing.T) {
	t.Parallel()
	tg := Target{
		ID:        1,
		Schedule:  mustCron(t, "30 1 * * *", "America/New_York"),
		NextRunAt: utc("2026-11-01T05:30:00Z"),
		Status:    StatusActive,
		CreatedAt: utc("2026-10-01T00:00:00Z"),
	}
	a := tg.Advance(utc("2026-11-01T07:00:00Z"), MissedPolicy{MaxCatchUp: 10})
	if len(a.Occurrences) != 1 || !a.Occurrences[0].Equal(utc("2026-11-01T05:30:00Z")) {
		t.Fatalf("occurrences %v, want only 2026-11-01T05:30:00Z", a.Occurrences)
	}
	if want := utc("2026-11-02T06:30:00Z"); !a.NextRunAt.Equal(want) {
		t.Fatalf("next run %v, want %v", a.NextRunAt, want)
	}
}

// TestScheduleDSTOracle compares Next with a minute-by-minute reading of
// the rule on days around transitions, in zones with one-hour, half-hour
// and midnight transitions. The oracle steps through real minutes:
// an interval slot fires at each minute whose wall clock matches; a fixed
// slot w fires at the first minute at which the highest wall clock shown
// so far reaches w.
func TestScheduleDSTOracle(t *testing.T) {
	t.Parallel()
	windows := []struct {
		zone string
		from string
	}{
		{"America/New_York", "2026-03-07T12:00:00Z"},
		{"America/New_York", "2026-10-31T12:00:00Z"},
		{"Europe/Berlin", "2026-03-28T12:00:00Z"},
		{"Europe/Berlin", "2026-10-24T12:00:00Z"},
		{"Australia/Sydney", "2026-04-04T00:00:00Z"},
		{"Australia/Sydney", "2026-10-03T00:00:00Z"},
		{"Australia/Lord_Howe", "2026-04-04T00:00:00Z"},
		{"Australia/Lord_Howe", "2026-10-03T00:00:00Z"},
		{"America/Santiago", "2026-04-04T12:00:00Z"},
		{"America/Santiago", "2026-09-05T12:00:00Z"},
	}
	exprs := []string{"30 1 * * *", "15 2 * * *", "0,30 2,3 * * *", "0 0 * * *", "45 23 * * *",
		"*/15 * * * *", "30 * * * *", "*/20 1-3 * * *"}
	for _, win := range windows {
		for _, expr := range exprs {
			t.Run(win.zone+" "+win.from+" "+expr, func(t *testing.T) {
				t.Parallel()
				s := mustCron(t, expr, win.zone)
				matches := func(w time.Time) bool { return s.spec.Next(w.Add(-time.Second)).Equal(w) }
				from := utc(win.from)
				var want []time.Time
				high := wallClock(from.In(s.loc))
				for i := from.Add(time.Minute); i.Before(from.Add(36 * time.Hour)); i = i.Add(time.Minute) {
					w := wallClock(i.In(s.loc))
					if s.fixed {
						if w.After(high) {
							if n := s.spec.Next(high); !n.After(w) {
								want = append(want, i)
							}
							high = w
						}
					} else if matches(w) {
						want = append(want, i)
					}
				}
				if len(want) == 0 {
					t.Fatal("the oracle found no slot")
				}
				got := nextN(s, from, len(want))
				for i := range want {
					if i >= len(got) || !got[i].Equal(want[i]) {
						t.Fatalf("slot %d: got %v, want %v", i, got, want)
					}
				}
			})
		}
	}
}

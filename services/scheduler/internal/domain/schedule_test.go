package domain

import (
	"errors"
	"testing"
	"time"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func mustCron(tb testing.TB, expr, zone string) Schedule {
	tb.Helper()
	s, err := ParseCron(expr, zone)
	if err != nil {
		tb.Fatalf("ParseCron(%q, %q): %v", expr, zone, err)
	}
	return s
}

// nextN returns the n slots after from.
func nextN(s Schedule, from time.Time, n int) []time.Time {
	var out []time.Time
	for t := from; len(out) < n; {
		t = s.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

func TestScheduleNext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		expr string
		zone string
		from string
		want []string
	}{
		{
			name: "daily 09:00 New York keeps local time across spring forward 2026-03-08",
			expr: "0 9 * * *", zone: "America/New_York", from: "2026-03-06T15:00:00Z",
			want: []string{"2026-03-07T14:00:00Z", "2026-03-08T13:00:00Z", "2026-03-09T13:00:00Z"},
		},
		{
			name: "daily 09:00 Berlin across spring forward 2026-03-29",
			expr: "0 9 * * *", zone: "Europe/Berlin", from: "2026-03-27T12:00:00Z",
			want: []string{"2026-03-28T08:00:00Z", "2026-03-29T07:00:00Z", "2026-03-30T07:00:00Z"},
		},
		{
			name: "@daily is local midnight",
			expr: "@daily", zone: "Europe/Berlin", from: "2026-03-28T12:00:00Z",
			want: []string{"2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"},
		},
		{
			name: "@hourly stays hourly in UTC through the Berlin DST gap",
			expr: "@hourly", zone: "Europe/Berlin", from: "2026-03-29T00:30:00Z",
			want: []string{"2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"},
		},
		{
			name: "every 15 minutes in UTC (empty zone)",
			expr: "*/15 * * * *", zone: "", from: "2026-01-01T10:07:30Z",
			want: []string{"2026-01-01T10:15:00Z", "2026-01-01T10:30:00Z"},
		},
		{
			name: "next is strictly after a slot",
			expr: "0 * * * *", zone: "Asia/Kolkata", from: "2026-01-01T10:30:00Z",
			want: []string{"2026-01-01T11:30:00Z", "2026-01-01T12:30:00Z"},
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
				if !got[i].Equal(utc(tt.want[i])) || got[i].Location() != time.UTC {
					t.Errorf("slot %d = %s, want %s", i, got[i].Format(time.RFC3339), tt.want[i])
				}
			}
		})
	}
}

func TestParseCronErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give, zone string
		want       error
	}{
		{give: "", want: ErrBadCron},
		{give: "61 * * * *", want: ErrBadCron},
		{give: "* * * *", want: ErrBadCron},
		{give: "0 0 30 2 *", want: ErrBadCron},
		{give: "@fortnightly", want: ErrBadCron},
		{give: "TZ=Europe/Berlin 0 9 * * *", want: ErrBadCron},
		{give: "@every 100ms", want: ErrBadCron},
		{give: "0 9 * * *", zone: "Mars/Olympus", want: ErrBadTimeZone},
		{give: "0 9 * * *", zone: "Local", want: ErrBadTimeZone},
	}
	for _, tt := range tests {
		if _, err := ParseCron(tt.give, tt.zone); !errors.Is(err, tt.want) {
			t.Errorf("ParseCron(%q, %q) = %v, want %v", tt.give, tt.zone, err, tt.want)
		}
	}
}

func TestOneShot(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.FixedZone("x", 2*3600))
	s := OneShot(at)
	if want := utc("2026-05-01T10:00:00.123456Z"); !s.DueAt().Equal(want) || s.DueAt().Location() != time.UTC {
		t.Fatalf("DueAt = %v, want %v in UTC", s.DueAt(), want)
	}
	if got := s.Next(utc("2026-05-01T09:00:00Z")); !got.Equal(s.DueAt()) {
		t.Errorf("Next before due = %v", got)
	}
	if got := s.Next(s.DueAt()); !got.IsZero() {
		t.Errorf("Next at due = %v, want zero", got)
	}
	if got := s.FirstRun(utc("2027-01-01T00:00:00Z")); !got.Equal(s.DueAt()) {
		t.Errorf("FirstRun after due = %v, want the due time", got)
	}
}

package domain

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Kind says whether a schedule fires once or repeatedly.
type Kind string

// Schedule kinds.
const (
	KindOnce Kind = "once"
	KindCron Kind = "cron"
)

// cronParser accepts the standard five fields (minute, hour, day of month,
// month, day of week) and descriptors such as @daily, @hourly or @every 1h.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// maxCronExprLen bounds the stored expression (the column is VARCHAR(255)).
const maxCronExprLen = 255

// Schedule says when a target falls due: once at DueAt, or at every slot of
// a cron expression evaluated in a time zone. The zero value is invalid;
// build one with OneShot or ParseCron. A Schedule is immutable and safe for
// concurrent use.
type Schedule struct {
	kind  Kind
	dueAt time.Time
	expr  string
	zone  string
	loc   *time.Location
	spec  cron.Schedule
	// fixed is set for a schedule at fixed times of day (see Next).
	fixed bool
}

// OneShot returns a schedule that fires once at dueAt, truncated to the
// microsecond (the precision the database keeps) and expressed in UTC.
func OneShot(dueAt time.Time) Schedule {
	return Schedule{kind: KindOnce, dueAt: dueAt.UTC().Truncate(time.Microsecond)}
}

// ParseCron parses a cron expression (five fields or a descriptor) to be
// evaluated in the IANA time zone zone ("" means UTC). Errors wrap
// ErrBadCron or ErrBadTimeZone. A "TZ=" or "CRON_TZ=" prefix is refused: the
// zone has its own field.
func ParseCron(expr, zone string) (Schedule, error) {
	expr = strings.TrimSpace(expr)
	if zone == "" {
		zone = "UTC"
	}
	switch {
	case expr == "":
		return Schedule{}, fmt.Errorf("%w: empty expression", ErrBadCron)
	case len(expr) > maxCronExprLen:
		return Schedule{}, fmt.Errorf("%w: longer than %d characters", ErrBadCron, maxCronExprLen)
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return Schedule{}, fmt.Errorf("%w: put the zone in time_zone, not in the expression", ErrBadCron)
	}
	loc, err := LoadZone(zone)
	if err != nil {
		return Schedule{}, err
	}
	spec, err := cronParser.Parse(expr)
	if err != nil {
		return Schedule{}, fmt.Errorf("%w: %v", ErrBadCron, err)
	}
	if rest, ok := strings.CutPrefix(expr, "@every "); ok {
		// robfig/cron silently rounds a shorter delay up to one second.
		if d, err := time.ParseDuration(strings.TrimSpace(rest)); err != nil || d < time.Second {
			return Schedule{}, fmt.Errorf("%w: @every needs a duration of at least 1s", ErrBadCron)
		}
	}
	s := Schedule{kind: KindCron, expr: expr, zone: zone, loc: loc, spec: spec, fixed: fixedTime(expr)}
	// robfig/cron gives up (returns the zero time) when no slot exists in
	// the next five years, e.g. "0 0 30 2 *".
	if s.spec.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, loc)).IsZero() {
		return Schedule{}, fmt.Errorf("%w: the expression never fires", ErrBadCron)
	}
	return s, nil
}

// LoadZone returns the IANA time zone name, or an error wrapping
// ErrBadTimeZone. "Local" is refused: it would depend on the host.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == "Local" {
		return nil, fmt.Errorf("%w: %q", ErrBadTimeZone, name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %q", ErrBadTimeZone, name)
	}
	return loc, nil
}

// Kind reports whether s fires once or on a cron expression.
func (s Schedule) Kind() Kind { return s.kind }

// DueAt is the due time of a one-shot schedule (zero for cron).
func (s Schedule) DueAt() time.Time { return s.dueAt }

// Expr is the cron expression ("" for a one-shot).
func (s Schedule) Expr() string { return s.expr }

// Zone is the IANA time zone of a cron schedule ("" for a one-shot).
func (s Schedule) Zone() string { return s.zone }

// IsZero reports whether s was never set.
func (s Schedule) IsZero() bool { return s.kind == "" }

// Next returns the first slot strictly after t, in UTC, or the zero time
// when there is none (a one-shot whose due time is not after t, or a cron
// expression without a slot in the next five years).
//
// Cron slots are wall-clock times of the schedule's zone, so a daily 09:00
// in Europe/Berlin stays at 09:00 local across DST changes. Where the zone's
// clock skips or repeats an hour, the rule depends on the expression:
//
//   - Fixed times (the minute and hour fields are values, lists or ranges,
//     such as "30 1 * * *", "0,30 2 * * 1-5", @daily, @weekly, @monthly,
//     @yearly): a slot fires at the first instant at which the zone's clock
//     reads its wall time or later. A wall time that occurs twice (the
//     repeated hour of a fall-back) fires once, at its first instant; a wall
//     time that does not occur (the skipped hour of a spring-forward) fires
//     at the first instant after the gap (02:30 in New York on the
//     spring-forward day fires at 03:00 EDT); several slots that land on
//     one instant fire once.
//   - Intervals (the minute or hour field starts with "*", such as
//     "*/15 * * * *", "30 * * * *", @hourly): a slot fires at every instant
//     whose wall clock matches, so these keep firing every real 15 minutes
//     or every real hour through both transitions: twice through a repeated
//     hour, never in a skipped one.
//   - @every d: every d of real time, whatever the zone.
//
// Next is safe for concurrent use.
func (s Schedule) Next(t time.Time) time.Time {
	switch s.kind {
	case KindOnce:
		if s.dueAt.After(t) {
			return s.dueAt
		}
		return time.Time{}
	case KindCron:
		return s.nextCron(t)
	}
	return time.Time{}
}

// maxClockShift bounds how far a zone's clock jumps at one transition (DST
// moves it by an hour, a few zones by 30 minutes or two hours).
const maxClockShift = 3 * time.Hour

// nextCron is Next for a cron schedule. robfig/cron steps through the
// instants of the zone and finds the first one whose wall clock matches,
// which is the rule for intervals and @every; fixed times differ from it
// only around a transition.
func (s Schedule) nextCron(t time.Time) time.Time {
	t = t.In(s.loc)
	n := s.spec.Next(t)
	if n.IsZero() {
		return n
	}
	if !s.fixed {
		return n.UTC()
	}
	// When t and robfig/cron's slot lie in one zone period, far enough from
	// its start that the period shows no wall time shown before it, the
	// clock runs straight from t to the slot and the rules agree.
	start, end := t.ZoneBounds()
	if (end.IsZero() || n.Before(end)) && (start.IsZero() || n.Sub(start) >= maxClockShift) {
		return n.UTC()
	}
	// Otherwise: the first slot whose first instant is after t.
	// firstInstant is monotonic in the wall time, so the slots after t's
	// wall time are the only candidates.
	for w := wallClock(t); ; {
		if w = s.spec.Next(w); w.IsZero() {
			return w
		}
		if i := firstInstant(w, s.loc); i.After(t) {
			return i.UTC()
		}
	}
}

// wallClock returns the wall clock reading of t in its location as the
// same reading in UTC, a frame without DST where robfig/cron steps through
// wall times.
func wallClock(t time.Time) time.Time {
	y, mo, d := t.Date()
	h, mi, sec := t.Clock()
	return time.Date(y, mo, d, h, mi, sec, t.Nanosecond(), time.UTC)
}

// offsetProbe is how far from a wall time w the offsets before and after
// a transition near w are read: UTC offsets lie within 14 hours, so every
// instant whose clock reads w lies within 14 hours of w read as UTC (zones
// do not change their offset twice in 30 hours).
const offsetProbe = 15 * time.Hour

// instants returns the instants, ascending, at which loc's clock reads the
// wall time w (given in UTC as by wallClock): none in a gap, two in a
// repeated hour, one otherwise.
func instants(w time.Time, loc *time.Location) []time.Time {
	var out []time.Time
	for _, probe := range []time.Time{w.Add(-offsetProbe), w.Add(offsetProbe)} {
		_, off := probe.In(loc).Zone()
		i := w.Add(-time.Duration(off) * time.Second)
		if !wallClock(i.In(loc)).Equal(w) || (len(out) == 1 && out[0].Equal(i)) {
			continue
		}
		out = append(out, i)
	}
	if len(out) == 2 && out[1].Before(out[0]) {
		out[0], out[1] = out[1], out[0]
	}
	return out
}

// firstInstant returns the first instant at which loc's clock reads the
// wall time w or later: w's only or first instant, or for a w that a gap
// skips, the instant the gap ends.
func firstInstant(w time.Time, loc *time.Location) time.Time {
	if is := instants(w, loc); len(is) > 0 {
		return is[0]
	}
	// In a gap, w read with the offset before the gap names an instant
	// after the gap's end (the clock jumped past w), in the period the gap
	// starts.
	_, off := w.Add(-offsetProbe).In(loc).Zone()
	start, _ := w.Add(-time.Duration(off) * time.Second).In(loc).ZoneBounds()
	return start
}

// fixedTime reports whether a cron expression names fixed times of day
// (see Next): a descriptor other than @hourly and @every, or five fields
// whose minute and hour fields do not start with a wildcard.
func fixedTime(expr string) bool {
	if strings.HasPrefix(expr, "@") {
		return expr != "@hourly" && !strings.HasPrefix(expr, "@every")
	}
	f := strings.Fields(expr)
	wild := func(field string) bool { return strings.HasPrefix(field, "*") || strings.HasPrefix(field, "?") }
	return len(f) >= 2 && !wild(f[0]) && !wild(f[1])
}

// FirstRun is the next_run_at of a new (or resumed) target at now: the
// due time of a one-shot, even when it has passed (it then fires at the next
// tick), or the first cron slot after now.
func (s Schedule) FirstRun(now time.Time) time.Time {
	if s.kind == KindOnce {
		return s.dueAt
	}
	return s.Next(now)
}

// Errors callers branch on; validation errors wrap them.
var (
	ErrBadCron     = errors.New("invalid cron expression")
	ErrBadTimeZone = errors.New("unknown time zone")
)

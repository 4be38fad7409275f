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
	s := Schedule{kind: KindCron, expr: expr, zone: zone, loc: loc, spec: spec}
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
// expression without a slot in the next five years). Cron slots are
// computed on the wall clock of the schedule's zone, so a daily 09:00 in
// Europe/Berlin stays at 09:00 local across DST changes; a wall time that a
// spring-forward skips does not fire that day, one that a fall-back repeats
// fires on each of its instants, as robfig/cron does.
func (s Schedule) Next(t time.Time) time.Time {
	switch s.kind {
	case KindOnce:
		if s.dueAt.After(t) {
			return s.dueAt
		}
		return time.Time{}
	case KindCron:
		n := s.spec.Next(t.In(s.loc))
		if n.IsZero() {
			return n
		}
		return n.UTC()
	}
	return time.Time{}
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

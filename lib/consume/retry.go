package consume

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// ErrPermanent marks handler errors that must not be retried.
var ErrPermanent = errors.New("permanent failure")

type permanentError struct{ err error }

func (e *permanentError) Error() string        { return e.err.Error() }
func (e *permanentError) Unwrap() []error      { return []error{e.err, ErrPermanent} }
func (e *permanentError) Is(target error) bool { return target == ErrPermanent }

// Permanent wraps err so that the runtime sends the record to the
// dead-letter topic at once instead of retrying it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// Backoff returns the wait before retry number attempt (1-based):
// exponential from min, capped at max, with full jitter over its upper half
// so that retries of many records do not move in lockstep.
func Backoff(attempt int, min, max time.Duration) time.Duration {
	d := min
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}

// sleep waits d or until ctx ends; it reports whether the full wait passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

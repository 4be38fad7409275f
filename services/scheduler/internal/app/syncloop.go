package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/notiflow/notiflow/lib/consume"
)

// copyPass copies MySQL rows to their Redis copy once: everything when
// full, else what changed at or after since. It returns the database time
// it started at (zero when it does not tell).
type copyPass func(ctx context.Context, full bool, since time.Time) (time.Time, error)

// keepCopy runs pass at start and then every interval until ctx ends, and
// returns nil. The first pass is full, and so is every pass until one
// succeeds; after that each gets since = syncMargin before the database
// time the last successful pass started at (pass may still decide on a
// full copy itself, for example when the copy's marker is gone). A failed
// pass is logged as "<what> sync to redis failed; retrying" with note
// appended, and retried sooner, with backoff from minBackoff up to
// interval. It returns an error only when interval is not positive.
func keepCopy(ctx context.Context, what string, interval, minBackoff time.Duration, log *slog.Logger, note string, pass copyPass) error {
	if interval <= 0 {
		return fmt.Errorf("%s sync: interval %s is not positive", what, interval)
	}
	msg := what + " sync to redis failed; retrying" + note
	full, since := true, time.Time{}
	for try := 1; ; try++ {
		start, err := pass(ctx, full, since)
		wait := interval
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Warn(msg, "full", full, "err", err)
			wait = min(wait, consume.Backoff(try, minBackoff, interval))
		} else {
			try, full, since = 0, false, start.Add(-syncMargin)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

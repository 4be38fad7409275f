package testkit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// StopTimeout bounds how long Background.Stop waits for the function to
// return after its context ended.
const StopTimeout = time.Minute

// Background is a function Go runs until the test ends or Stop.
type Background struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	once   sync.Once
	stop   error
}

// Go runs fn in its own goroutine with a context that ends when the test
// ends (or at Stop). The test's cleanup stops it and fails the test if fn
// then returns an error other than context.Canceled, or does not return
// within StopTimeout.
func Go(tb testing.TB, fn func(ctx context.Context) error) *Background {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &Background{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		b.err = fn(ctx)
	}()
	tb.Cleanup(func() {
		if err := b.Stop(); err != nil && !errors.Is(err, context.Canceled) {
			tb.Errorf("background function: %v", err)
		}
	})
	return b
}

// Stop cancels fn's context, waits up to StopTimeout for fn to return and
// returns fn's error (or a timeout error). Later calls return the same.
func (b *Background) Stop() error {
	b.once.Do(func() {
		b.cancel()
		select {
		case <-b.done:
			b.stop = b.err
		case <-time.After(StopTimeout):
			b.stop = fmt.Errorf("did not return within %s of cancel", StopTimeout)
		}
	})
	return b.stop
}

// Done is closed once fn has returned; Err then returns its error.
func (b *Background) Done() <-chan struct{} { return b.done }

// Err returns fn's error once Done is closed (nil before).
func (b *Background) Err() error {
	select {
	case <-b.done:
		return b.err
	default:
		return nil
	}
}

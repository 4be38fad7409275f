package consume

import (
	"context"
	"errors"
)

// ErrDraining is what a handler returns, wrapped or not, when it gave up a
// wait because its generation's drain began (see Draining). Returned after
// the drain began, it is not a failure: the record is abandoned, neither
// retried nor dead lettered nor committed, and the partition's next owner
// runs it again. Returned at any other time it is an ordinary error.
var ErrDraining = errors.New("generation draining")

// drainingKey carries, in a handler context, the channel that Draining
// returns.
type drainingKey struct{}

// Draining returns a channel that is closed when the drain of the
// generation that handed ctx to its handler begins: at a rebalance notice
// or when the consumer is stopped. Its handlers still run until they return
// or the drain deadline cancels ctx; Draining lets a handler whose wait
// holds nothing (a rate-limit wait, a timer) give way at once by returning
// an error wrapping ErrDraining, so that the drain need not wait for it.
// Work that must finish, such as a send in progress, should ignore it. For
// a context that no handler was given it returns nil (never ready).
func Draining(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(drainingKey{}).(<-chan struct{})
	return ch
}

// gaveWay reports whether err is a handler's giving way to the drain (see
// ErrDraining) after the generation's drain began.
func (g *generation[T]) gaveWay(err error) bool {
	select {
	case <-g.draining:
		return errors.Is(err, ErrDraining)
	default:
		return false
	}
}

package consume

import (
	"context"
	"errors"
)

// ErrDraining is what a handler returns, wrapped or not, when it gave up a
// wait because its generation is draining (see Draining).
var ErrDraining = errors.New("generation draining")

// Draining returns a channel that is closed when the drain of the
// generation that handed ctx to a handler begins.
func Draining(ctx context.Context) <-chan struct{} {
	return nil
}

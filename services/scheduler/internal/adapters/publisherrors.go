package adapters

import (
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/services/scheduler/internal/app"
)

// outcomes turns the result of a publish call of n notes into the
// publisher's error. written[j] is the note of the j-th message written;
// refused, nil or one entry per note, holds the notes not written (not
// encodable); err is what WriteMessages returned. It returns nil when
// every note was acknowledged, an app.PublishErrors when the outcome of
// each note is known, and err itself otherwise.
func outcomes(err error, n int, written []int, refused app.PublishErrors) error {
	if err == nil {
		if refused == nil {
			return nil
		}
		return refused
	}
	var (
		werrs  kafka.WriteErrors
		tooBig kafka.MessageTooLargeError
	)
	switch {
	case errors.As(err, &werrs) && len(werrs) == len(written):
		if refused == nil {
			refused = make(app.PublishErrors, n)
		}
		for j, e := range werrs {
			if errors.Is(e, kafka.MessageSizeTooLarge) {
				e = fmt.Errorf("%w: %w", app.ErrUnpublishable, e)
			}
			refused[written[j]] = e
		}
		return refused
	case errors.As(err, &tooBig):
		// The writer refused the call before writing anything, for one
		// record over its limit: every note of the call is a suspect.
		if refused == nil {
			refused = make(app.PublishErrors, n)
		}
		for _, i := range written {
			refused[i] = fmt.Errorf("%w: a record of the call is over the producer's limit: %w", app.ErrUnpublishable, err)
		}
		return refused
	default:
		return err
	}
}

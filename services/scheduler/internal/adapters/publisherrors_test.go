package adapters

import (
	"errors"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/services/scheduler/internal/app"
)

// TestOutcomes maps the writer's errors onto the notes of a call: a
// record the broker refused as too large, or one the writer refused
// before writing, is unpublishable; a retriable failure is not; a note
// not encodable keeps its own entry.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	notEncodable := errors.Join(app.ErrUnpublishable, errors.New("encode"))
	tests := []struct {
		name    string
		err     error
		n       int
		written []int
		refused app.PublishErrors
		// want: per note, "" acknowledged, "u" unpublishable, "r" retriable;
		// nil: the error itself is returned.
		want []string
	}{
		{name: "all acknowledged", n: 2, written: []int{0, 1}, want: []string{}},
		{name: "not encodable, rest acknowledged", n: 2, written: []int{1},
			refused: app.PublishErrors{notEncodable, nil}, want: []string{"u", ""}},
		{name: "broker refused a batch", n: 3, written: []int{0, 1, 2},
			err:  kafka.WriteErrors{nil, kafka.MessageSizeTooLarge, kafka.NotLeaderForPartition},
			want: []string{"", "u", "r"}},
		{name: "writer refused the call", n: 3, written: []int{0, 2},
			refused: app.PublishErrors{nil, notEncodable, nil},
			err:     kafka.MessageTooLargeError{}, want: []string{"u", "u", "u"}},
		{name: "anything else", n: 1, written: []int{0}, err: kafka.BrokerNotAvailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := outcomes(tt.err, tt.n, tt.written, tt.refused)
			if tt.want == nil {
				if got != tt.err {
					t.Fatalf("outcomes = %v, want %v itself", got, tt.err)
				}
				return
			}
			if len(tt.want) == 0 {
				if got != nil {
					t.Fatalf("outcomes = %v, want nil", got)
				}
				return
			}
			var perrs app.PublishErrors
			if !errors.As(got, &perrs) || len(perrs) != tt.n {
				t.Fatalf("outcomes = %v, want %d entries", got, tt.n)
			}
			for i, w := range tt.want {
				e := perrs[i]
				var g string
				switch {
				case e == nil:
				case errors.Is(e, app.ErrUnpublishable):
					g = "u"
				default:
					g = "r"
				}
				if g != w {
					t.Errorf("note %d: %q (%v), want %q", i, g, e, w)
				}
			}
		})
	}
}

package adapters

import (
	"reflect"
	"strings"
	"testing"

	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

func TestSplitByBatch(t *testing.T) {
	t.Parallel()
	// msg builds a record for partition p (its key) with a value of n bytes.
	msg := func(p string, n int) kafka.Message {
		return kafka.Message{Key: []byte(p), Value: []byte(strings.Repeat("x", n))}
	}
	byKey := func(m kafka.Message) int { return int(m.Key[0] - 'a') }
	one := recordBytes(&kafka.Message{Key: []byte("a"), Value: make([]byte, 100)})
	tests := []struct {
		name     string
		give     []kafka.Message
		maxCount int
		maxBytes int64
		want     [][]int
	}{
		{
			name: "all fit in one call", maxCount: 3, maxBytes: 1 << 20,
			give: []kafka.Message{msg("a", 100), msg("b", 100), msg("a", 100), msg("b", 100)},
			want: [][]int{{0, 1, 2, 3}},
		},
		{
			name: "a partition over the count spills, in order", maxCount: 2, maxBytes: 1 << 20,
			give: []kafka.Message{msg("a", 100), msg("a", 100), msg("b", 100), msg("a", 100), msg("a", 100), msg("a", 100)},
			want: [][]int{{0, 1, 2}, {3, 4}, {5}},
		},
		{
			name: "a partition over the bytes spills", maxCount: 100, maxBytes: 2 * one,
			give: []kafka.Message{msg("a", 100), msg("b", 100), msg("a", 100), msg("a", 100), msg("b", 100)},
			want: [][]int{{0, 1, 2, 4}, {3}},
		},
		{
			name: "exactly the bytes still fits", maxCount: 100, maxBytes: 3 * one,
			give: []kafka.Message{msg("a", 100), msg("a", 100), msg("a", 100), msg("a", 100)},
			want: [][]int{{0, 1, 2}, {3}},
		},
		{
			name: "a record over the bytes goes alone", maxCount: 100, maxBytes: one,
			give: []kafka.Message{msg("a", 100), msg("a", 5000), msg("a", 100)},
			want: [][]int{{0}, {1}, {2}},
		},
		{
			name: "a record over the bytes shares its call with no partition", maxCount: 100, maxBytes: one,
			give: []kafka.Message{msg("a", 100), msg("b", 100), msg("a", 5000), msg("b", 100), msg("a", 100), msg("b", 5000), msg("b", 100)},
			want: [][]int{{0, 1}, {2}, {3, 4}, {5}, {6}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := splitByBatch(tt.give, byKey, tt.maxCount, tt.maxBytes); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("splitByBatch = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRecordBytesCountsHeaders(t *testing.T) {
	t.Parallel()
	m := kafka.Message{Key: []byte("k"), Value: []byte("vv"),
		Headers: []kafka.Header{{Key: "h", Value: make([]byte, 200)}}}
	// 22 framing + 1 key + 2 value + 1 header count + (1+1) key + (2+200) value.
	if got, want := recordBytes(&m), int64(22+1+2+1+2+202); got != want {
		t.Errorf("recordBytes = %d, want %d", got, want)
	}
}

// TestFillDueChannel: every channel a target may have reaches the event as
// the contract's channel of the same name; an unknown one stays
// unspecified.
func TestFillDueChannel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give domain.Channel
		want notiflowv1.Channel
	}{
		{domain.ChannelWebhook, notiflowv1.Channel_CHANNEL_WEBHOOK},
		{domain.ChannelInbox, notiflowv1.Channel_CHANNEL_INBOX},
		{domain.ChannelSim, notiflowv1.Channel_CHANNEL_SIM},
		{domain.Channel("carrier-pigeon"), notiflowv1.Channel_CHANNEL_UNSPECIFIED},
	}
	for _, tt := range tests {
		if tt.want != notiflowv1.Channel_CHANNEL_UNSPECIFIED && !tt.give.Valid() {
			t.Errorf("%q is not a valid domain channel", tt.give)
		}
		var pb notiflowv1.NotificationDue
		fillDue(&pb, &domain.Notification{Channel: tt.give})
		if pb.Channel != tt.want {
			t.Errorf("channel %q became %v, want %v", tt.give, pb.Channel, tt.want)
		}
	}
}

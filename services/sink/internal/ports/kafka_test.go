package ports

import (
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/sink/internal/domain"
)

func encode(t *testing.T, ev *notiflowv1.NotificationDispatched) *kafka.Message {
	t.Helper()
	v, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return &kafka.Message{Value: v}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 6, 1, 12, 0, 0, 123456000, time.UTC)
	r, err := Decode(encode(t, &notiflowv1.NotificationDispatched{
		NotificationId: "n1", RecipientId: "r", Channel: notiflowv1.Channel_CHANNEL_INBOX,
		Status: notiflowv1.Status_STATUS_DUPLICATE, OriginalStatus: notiflowv1.Status_STATUS_FAILED,
		DueAtUs: at.UnixMicro(), DispatchedAtUs: at.UnixMicro(), OccurrenceAtUs: at.UnixMicro(), Attempts: 2,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != domain.StatusDuplicate || r.OriginalStatus != domain.StatusFailed || r.Channel != "inbox" ||
		!r.DispatchedAt.Equal(at) || r.Attempts != 2 {
		t.Fatalf("decoded %+v", r)
	}
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give *kafka.Message
	}{
		{"not protobuf", &kafka.Message{Value: []byte{0xff, 0xff}}},
		{"no notification id", encode(t, &notiflowv1.NotificationDispatched{Status: notiflowv1.Status_STATUS_DELIVERED})},
		{"no status", encode(t, &notiflowv1.NotificationDispatched{NotificationId: "n"})},
		{"time out of range", encode(t, &notiflowv1.NotificationDispatched{NotificationId: "n", Status: notiflowv1.Status_STATUS_DELIVERED,
			DueAtUs: time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()})},
	}
	for _, tt := range tests {
		if _, err := Decode(tt.give); err == nil {
			t.Errorf("%s: decoded without error", tt.name)
		}
	}
}

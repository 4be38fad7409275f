package adapters

import (
	"math"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/notiflow/notiflow/lib/kafkax"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// What a Kafka record adds to its key, value and header bytes, at most:
// kafka-go counts 22 bytes per record (its check against the writer's
// BatchBytes); a record batch of one record on the wire, which the broker
// checks against max.message.bytes, adds a 61-byte batch header and up to
// 30 bytes of varints per record and 10 per header.
const (
	recordOverhead = 61 + 30
	headerOverhead = 10
)

// widest is a time whose microseconds since the epoch take the most bytes
// as a protobuf varint (a negative value).
var widest = time.UnixMicro(-1)

// DueRecordBytes bounds the size, as a Kafka record, of any notification
// of t the publisher writes (see DuePublisher): it encodes one whose
// fields that do not come from t (ids, times, sequence) are at their
// widest. It is safe for concurrent use.
func DueRecordBytes(t domain.Target) int {
	n := domain.Notification{
		ID: strings.Repeat("0", 36), TargetID: -1, RecipientID: t.RecipientID, Channel: t.Channel,
		WebhookURL: t.WebhookURL, TemplateID: t.TemplateID, Params: t.Params,
		DueAt: widest, OccurrenceAt: widest, Sequence: math.MaxUint64, RunID: t.RunID, CreatedAt: widest,
		SecretRequired: true, TargetVersion: math.MaxUint64,
	}
	var pb notiflowv1.NotificationDue
	fillDue(&pb, &n)
	size := recordOverhead + len(n.RecipientID) + proto.Size(&pb)
	for _, h := range kafkax.ContractHeaders(n.RunID) {
		size += headerOverhead + len(h.Key) + len(h.Value)
	}
	return size
}

// MaxDueRecordBytes bounds DueRecordBytes over every target the API
// accepts with params of at most maxParamsBytes (every other field at its
// longest, a run id included).
func MaxDueRecordBytes(maxParamsBytes int) int {
	return DueRecordBytes(domain.Target{
		RecipientID: strings.Repeat("r", domain.MaxRecipientLen),
		Channel:     domain.ChannelWebhook,
		WebhookURL:  strings.Repeat("u", domain.MaxWebhookURLLen),
		TemplateID:  strings.Repeat("t", domain.MaxTemplateLen),
		Params:      make([]byte, maxParamsBytes),
		RunID:       strings.Repeat("i", domain.MaxRunIDLen),
	})
}

package adapters

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/notiflow/notiflow/lib/consume"
	"github.com/notiflow/notiflow/lib/simsend"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/dispatcher/internal/domain"
)

// Inbox is the in-app channel: nothing is called, the persisted result row
// (which carries the rendered body) is the notification. It is safe for
// concurrent use.
type Inbox struct{}

// Send delivers at once.
func (Inbox) Send(context.Context, *notiflowv1.NotificationDue, string) (domain.Outcome, error) {
	return domain.Outcome{Status: notiflowv1.Status_STATUS_DELIVERED, Attempts: 1}, nil
}

// SimRecorder counts simulated sends; *Store implements it.
type SimRecorder interface {
	RecordSimSend(ctx context.Context, runID, field string) error
}

// Sim is the simulated provider for benchmarks and tests: it waits
// Latency (or the record's params._sim_latency_ms) and fails with
// probability FailureRate. Every send of a record with a run id is counted
// in Redis (see Store.RecordSimSend) so that a benchmark can check
// independently that nothing was sent twice. It is safe for concurrent use.
type Sim struct {
	Latency     time.Duration
	FailureRate float64
	Recorder    SimRecorder
	// Backoff bounds the waits while the send cannot be recorded.
	BackoffMin, BackoffMax time.Duration

	// last is the most recent params holding a latency override and the
	// latency they give: a benchmark run's records all carry the same
	// params, so each is decoded once, not once a record.
	last atomic.Pointer[simParams]
}

// simParams is a record's params and the latency they give.
type simParams struct {
	raw string
	lat time.Duration
	ok  bool // the params override the latency
}

// simLatencyParam is the per-record latency override.
var simLatencyParam = []byte(`"_sim_latency_ms"`)

// latency is how long a send of a record with params waits: the
// params' _sim_latency_ms when it is a number ≥ 0, else s.Latency.
func (s *Sim) latency(params []byte) time.Duration {
	if !bytes.Contains(params, simLatencyParam) {
		return s.Latency
	}
	p := s.last.Load()
	if p == nil || p.raw != string(params) {
		p = &simParams{raw: string(params)}
		p.lat, p.ok = parseSimLatency(params)
		s.last.Store(p)
	}
	if !p.ok {
		return s.Latency
	}
	return p.lat
}

// parseSimLatency decodes params' _sim_latency_ms; ok is false when the
// params are not a JSON object or the value is not a number ≥ 0.
func parseSimLatency(params []byte) (lat time.Duration, ok bool) {
	var p struct {
		Ms *float64 `json:"_sim_latency_ms"`
	}
	if json.Unmarshal(params, &p) != nil || p.Ms == nil || *p.Ms < 0 {
		return 0, false
	}
	return time.Duration(*p.Ms * float64(time.Millisecond)), true
}

// Send simulates one provider call. It returns an error only when ctx ended
// before the send was recorded.
func (s *Sim) Send(ctx context.Context, due *notiflowv1.NotificationDue, _ string) (domain.Outcome, error) {
	lat := s.latency(due.ParamsJson)
	if lat > 0 {
		t := time.NewTimer(lat)
		select {
		case <-ctx.Done():
			t.Stop()
			return domain.Outcome{}, fmt.Errorf("simulated send: %w", ctx.Err())
		case <-t.C:
		}
	}
	if s.FailureRate > 0 && rand.Float64() < s.FailureRate {
		return domain.Outcome{Status: notiflowv1.Status_STATUS_FAILED, Attempts: 1, ProviderCode: 503, Err: "simulated provider failure", DeadLetter: true}, nil
	}
	if due.RunId != "" && s.Recorder != nil {
		field := simsend.Field(due.TargetId, due.OccurrenceAtUs)
		for try := 1; ; try++ {
			err := s.Recorder.RecordSimSend(ctx, due.RunId, field)
			if err == nil {
				break
			}
			t := time.NewTimer(consume.Backoff(try, s.BackoffMin, s.BackoffMax))
			select {
			case <-ctx.Done():
				t.Stop()
				return domain.Outcome{}, fmt.Errorf("simulated send: %w (last: %v)", ctx.Err(), err)
			case <-t.C:
			}
		}
	}
	return domain.Outcome{Status: notiflowv1.Status_STATUS_DELIVERED, Attempts: 1, ProviderCode: 200}, nil
}

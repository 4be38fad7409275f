package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	schedulerdomain "github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// Status is where a run is in its life.
type Status string

// Statuses, in order. A run is created "creating" (its targets are being
// inserted), is "waiting" until its due time, "running" until every
// notification is persisted ("done"), the pipeline stalls or the watching
// replica stops ("failed"), or a client cancels it ("cancelled").
const (
	StatusCreating  Status = "creating"
	StatusWaiting   Status = "waiting"
	StatusRunning   Status = "running"
	StatusDone      Status = "done"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Final reports whether s is an end state.
func (s Status) Final() bool {
	return s == StatusDone || s == StatusFailed || s == StatusCancelled
}

// ActiveStatuses are the statuses of a run that is not final.
var ActiveStatuses = []Status{StatusCreating, StatusWaiting, StatusRunning}

// Channels a benchmark drives.
const (
	ChannelSim   = "sim"
	ChannelInbox = "inbox"
)

// Template is the dispatcher's built-in template for benchmark
// notifications (services/dispatcher/internal/domain/builtin_templates.json).
const Template = "bench"

// SimLatencyParam is the per-notification latency override the
// dispatcher's simulated provider honours (milliseconds).
const SimLatencyParam = "_sim_latency_ms"

// MaxSimLatencyMs bounds sim_latency_ms.
const MaxSimLatencyMs = 10000

// Params are what a client asks of a run (the body of POST
// /admin/benchmarks).
type Params struct {
	Notifications int    `json:"notifications"`
	Recipients    int    `json:"recipients"`
	Channel       string `json:"channel"`
	// SimLatencyMs is the simulated provider's latency per send; absent
	// leaves the dispatcher's NOTIFLOW_SIM_LATENCY. Ignored for inbox.
	SimLatencyMs *int `json:"sim_latency_ms,omitempty"`
	// WebhookURL is part of the client's request type; the benchmark does
	// not drive webhooks, so a non-empty value is refused.
	WebhookURL string `json:"webhook_url,omitempty"`
}

// ValidationError names the parameter that is wrong and why.
type ValidationError struct {
	Field string
	Msg   string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Msg }

// Validate checks p against the limits; maxNotifications is the configured
// largest run. Errors are *ValidationError.
func (p Params) Validate(maxNotifications int) error {
	bad := func(field, format string, args ...any) error {
		return &ValidationError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case p.Notifications < 1 || p.Notifications > maxNotifications:
		return bad("notifications", "must be between 1 and %d, got %d", maxNotifications, p.Notifications)
	case p.Recipients < 1 || p.Recipients > p.Notifications:
		return bad("recipients", "must be between 1 and notifications (%d), got %d", p.Notifications, p.Recipients)
	case p.Channel == "":
		return bad("channel", "is required (sim or inbox)")
	case p.Channel != ChannelSim && p.Channel != ChannelInbox:
		return bad("channel", "must be sim or inbox, got %q", p.Channel)
	case p.SimLatencyMs != nil && (*p.SimLatencyMs < 0 || *p.SimLatencyMs > MaxSimLatencyMs):
		return bad("sim_latency_ms", "must be between 0 and %d, got %d", MaxSimLatencyMs, *p.SimLatencyMs)
	case p.WebhookURL != "":
		return bad("webhook_url", "the benchmark drives channel sim or inbox only")
	}
	return nil
}

// TargetParams returns the params JSON of the run's targets.
func (p Params) TargetParams() []byte {
	if p.Channel == ChannelSim && p.SimLatencyMs != nil {
		return []byte(`{"` + SimLatencyParam + `":` + strconv.Itoa(*p.SimLatencyMs) + `}`)
	}
	return []byte("{}")
}

// RecipientPrefix returns the prefix of run id's recipient ids: target i
// goes to RecipientPrefix(id) + strconv.Itoa(i % Recipients).
func RecipientPrefix(runID string) string { return "bench-" + runID + "-" }

// Progress counts a run's notifications at each stage. Dispatched is the
// number of distinct occurrences the simulated provider sent; it stays 0
// for channel inbox, whose provider keeps no count.
type Progress struct {
	TargetsCreated int64 `json:"targetsCreated"`
	OutboxRows     int64 `json:"outboxRows"`
	Published      int64 `json:"published"`
	Dispatched     int64 `json:"dispatched"`
	Persisted      int64 `json:"persisted"`
}

// Run is a benchmark run as the admin API shows it.
type Run struct {
	ID         string     `json:"id"`
	Status     Status     `json:"status"`
	Params     Params     `json:"params"`
	CreatedAt  time.Time  `json:"createdAt"`
	DueAt      time.Time  `json:"dueAt"`
	SetupSec   float64    `json:"setupSec"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
	Progress   Progress   `json:"progress"`
	Report     *Report    `json:"report,omitempty"`
	Error      string     `json:"error,omitempty"`
}

// Report is a finished run's result. Times are seconds from the run's due
// time (the clock starts when the targets fall due; creating them is
// SetupSec, reported apart).
type Report struct {
	// Eligible is the number of notifications the run asked for.
	Eligible int64 `json:"eligible"`
	// OutboxCreated is the number of outbox rows the claims wrote.
	OutboxCreated int64 `json:"outboxCreated"`
	// EventPublishSec is when the last outbox row was acknowledged by
	// Kafka (sampled, see app.Watcher).
	EventPublishSec float64 `json:"eventPublishSec"`
	// TotalSec is when the last row was persisted.
	TotalSec float64 `json:"totalSec"`
	// MsgsPerSecond is distinct persisted occurrences / TotalSec.
	MsgsPerSecond float64     `json:"msgsPerSecond"`
	LatencyMs     Percentiles `json:"latencyMs"`
	// StagesPerSecond: claim, publish, dispatch and persist throughput.
	StagesPerSecond map[string]float64 `json:"stagesPerSecond"`
	// PeakLag is the largest sampled lag of each consumer group.
	PeakLag map[string]int64 `json:"peakLag"`
	// Lost is Eligible minus the distinct occurrences persisted.
	Lost int64 `json:"lost"`
	// Duplicates counts occurrences sent more than once or persisted in
	// more than one row (each occurrence once).
	Duplicates          int64   `json:"duplicates"`
	DuplicatesSent      int64   `json:"duplicatesSent"`
	DuplicatesPersisted int64   `json:"duplicatesPersisted"`
	Series              *Series `json:"series,omitempty"`
}

// Percentiles of a latency distribution, in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

// Series are the run's time series for the chart.
type Series struct {
	// PersistedPerSecond[i] is the number of rows persisted during second
	// i after the due time.
	PersistedPerSecond []int64 `json:"persistedPerSecond"`
	// Lag is the sampled consumer lag per group.
	Lag []LagPoint `json:"lag"`
}

// LagPoint is the lag of each consumer group T seconds after the due time.
// In JSON it is one object: {"t": 1.25, "<group>": 1200, ...}.
type LagPoint struct {
	T   float64
	Lag map[string]int64
}

// MarshalJSON writes {"t": T, "<group>": lag, ...} with groups in name order.
func (p LagPoint) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"t":`)
	b.WriteString(strconv.FormatFloat(p.T, 'f', -1, 64))
	groups := make([]string, 0, len(p.Lag))
	for g := range p.Lag {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		name, err := json.Marshal(g)
		if err != nil {
			return nil, err
		}
		b.WriteByte(',')
		b.Write(name)
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(p.Lag[g], 10))
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *LagPoint) UnmarshalJSON(data []byte) error {
	var m map[string]json.Number
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	t, ok := m["t"]
	if !ok {
		return errors.New("lag point without t")
	}
	f, err := t.Float64()
	if err != nil {
		return fmt.Errorf("lag point t: %w", err)
	}
	p.T, p.Lag = f, make(map[string]int64, len(m)-1)
	for k, v := range m {
		if k == "t" {
			continue
		}
		n, err := v.Int64()
		if err != nil {
			return fmt.Errorf("lag point %s: %w", k, err)
		}
		p.Lag[k] = n
	}
	return nil
}

// Errors callers branch on.
var (
	// ErrNotFound: no run with that id.
	ErrNotFound = errors.New("benchmark run not found")
	// ErrBusy: another run is not final yet.
	ErrBusy = errors.New("another benchmark run is in progress")
)

// TargetRange locates a run's targets (the scheduler's definition: ids
// MinID..MaxID of run RunID, Exclusive when no other target has an id in
// the range).
type TargetRange = schedulerdomain.TargetRange

// Record is a stored run with what only the service needs: the replica
// watching it and where its targets are.
type Record struct {
	Run     Run
	Owner   string
	Targets TargetRange
}

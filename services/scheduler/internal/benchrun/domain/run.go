package domain

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/notiflow/notiflow/lib/benchreport"
	"github.com/notiflow/notiflow/lib/webhooksig"
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
	ChannelSim     = "sim"
	ChannelInbox   = "inbox"
	ChannelWebhook = "webhook"
)

// Template is the built-in template for benchmark
// notifications (lib/templates/builtin.json).
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
	// leaves the dispatcher's NOTIFLOW_SIM_LATENCY. Ignored for inbox and
	// webhook.
	SimLatencyMs *int `json:"sim_latency_ms,omitempty"`
	// WebhookURL is where a webhook run's targets are delivered: required
	// for channel webhook, refused for the others. Besides Validate, it
	// gets the check the API's webhook targets get (the destination guard,
	// NOTIFLOW_WEBHOOK_ALLOW) before the run is created.
	WebhookURL string `json:"webhook_url,omitempty"`
	// WebhookSecret (whsec_..., channel webhook only, optional) is the
	// signing secret every target of the run gets instead of one generated
	// per target, so that one receiver can verify every call. It is not
	// stored with the run nor shown (Service.Start clears it); without it
	// each target gets its own secret, as the API's targets do.
	WebhookSecret string `json:"webhook_secret,omitempty"`
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
		return bad("channel", "is required (sim, inbox or webhook)")
	case p.Channel != ChannelSim && p.Channel != ChannelInbox && p.Channel != ChannelWebhook:
		return bad("channel", "must be sim, inbox or webhook, got %q", p.Channel)
	case p.SimLatencyMs != nil && (*p.SimLatencyMs < 0 || *p.SimLatencyMs > MaxSimLatencyMs):
		return bad("sim_latency_ms", "must be between 0 and %d, got %d", MaxSimLatencyMs, *p.SimLatencyMs)
	case p.Channel == ChannelWebhook && p.WebhookURL == "":
		return bad("webhook_url", "is required for channel webhook")
	case p.Channel != ChannelWebhook && p.WebhookURL != "":
		return bad("webhook_url", "applies to channel webhook only")
	case p.Channel != ChannelWebhook && p.WebhookSecret != "":
		return bad("webhook_secret", "applies to channel webhook only")
	}
	if p.WebhookSecret != "" {
		if _, err := webhooksig.Decode(p.WebhookSecret); err != nil {
			return bad("webhook_secret", "%v", err)
		}
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

// The report types are the admin API's JSON format, which the bench
// harness reads too; lib/benchreport owns it.
type (
	Progress    = benchreport.Progress
	Report      = benchreport.Report
	Percentiles = benchreport.Percentiles
	Series      = benchreport.Series
	LagPoint    = benchreport.LagPoint
)

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

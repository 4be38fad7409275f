package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// Channel is how a notification reaches its recipient.
type Channel string

// Channels.
const (
	ChannelWebhook Channel = "webhook" // HTTP POST to the target's URL
	ChannelInbox   Channel = "inbox"   // in-app inbox: the stored row is the notification
	ChannelSim     Channel = "sim"     // simulated provider, for benchmarks and tests
)

// Valid reports whether c is a known channel.
func (c Channel) Valid() bool {
	return c == ChannelWebhook || c == ChannelInbox || c == ChannelSim
}

// Status is a target's lifecycle state. Only active targets are claimed.
type Status string

// Statuses.
const (
	StatusActive  Status = "active"
	StatusPaused  Status = "paused"
	StatusDone    Status = "done" // a one-shot that fired, or a cron without further slots
	StatusDeleted Status = "deleted"
)

// Column sizes, enforced here so that the database never truncates.
const (
	MaxRecipientLen  = 191
	MaxTemplateLen   = 191
	MaxWebhookURLLen = 2048
	MaxRunIDLen      = 64
)

// Target is one notification plan: notify RecipientID on Channel with
// TemplateID and Params, on Schedule.
type Target struct {
	ID          int64
	RecipientID string
	Channel     Channel
	WebhookURL  string
	TemplateID  string
	// Params is a compact JSON object ("{}" when none was given).
	Params    []byte
	Schedule  Schedule
	NextRunAt time.Time
	Status    Status
	RunID     string
	CreatedAt time.Time
	UpdatedAt time.Time
	// Version grows with every change made to the target through the API
	// (PATCH, pause, resume, delete); an occurrence claimed under an older
	// version is fenced (see the scheduler README, "Fences").
	Version uint64
	// WebhookSecret is the signing secret (whsec_...) a webhook target
	// gets at creation; it is set only on the target the creating call
	// returns, never read back.
	WebhookSecret string
}

// SameDefinition reports whether t and o describe the same notifications:
// the same webhook URL, template, params (byte for byte, both compact)
// and schedule. Status, next run, times and version are not compared.
func (t Target) SameDefinition(o Target) bool {
	return t.WebhookURL == o.WebhookURL && t.TemplateID == o.TemplateID && bytes.Equal(t.Params, o.Params) &&
		t.Schedule.Kind() == o.Schedule.Kind() && t.Schedule.Expr() == o.Schedule.Expr() &&
		t.Schedule.Zone() == o.Schedule.Zone() && t.Schedule.DueAt().Equal(o.Schedule.DueAt())
}

// Limits bounds what a target may carry.
type Limits struct {
	MaxParamsBytes int
	// MaxRecordBytes bounds the size of a target's notifications as Kafka
	// records, as RecordBytes measures them; checked when both are set.
	MaxRecordBytes int
	RecordBytes    func(Target) int
}

// ValidationError says which field of a target is wrong and why. Field uses
// the JSON names of the API.
type ValidationError struct {
	Field string
	Msg   string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Msg }

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// NewTarget checks the parts of a new target and returns it active, with
// NextRunAt computed from now. params may be empty (meaning {}); otherwise
// it must be a JSON object, which is stored compacted and must then fit
// limits.MaxParamsBytes; the target's notifications must fit
// limits.MaxRecordBytes as Kafka records. Errors are *ValidationError.
func NewTarget(recipientID string, ch Channel, webhookURL, templateID string, params []byte, sched Schedule, now time.Time, limits Limits) (Target, error) {
	if err := checkText("recipient_id", recipientID, MaxRecipientLen); err != nil {
		return Target{}, err
	}
	if err := checkText("template_id", templateID, MaxTemplateLen); err != nil {
		return Target{}, err
	}
	switch {
	case ch == "":
		return Target{}, invalid("channel", "is required (webhook, inbox or sim)")
	case !ch.Valid():
		return Target{}, invalid("channel", "unknown channel %q (want webhook, inbox or sim)", string(ch))
	case ch == ChannelWebhook:
		if err := checkWebhookURL(webhookURL); err != nil {
			return Target{}, err
		}
	case webhookURL != "":
		return Target{}, invalid("webhook_url", "is only allowed for channel webhook")
	}
	compact, err := normalizeParams(params, limits.MaxParamsBytes)
	if err != nil {
		return Target{}, err
	}
	if sched.IsZero() {
		return Target{}, invalid("schedule", "give either due_at or cron")
	}
	next := sched.FirstRun(now)
	if next.IsZero() {
		return Target{}, invalid("cron", "the expression has no slot in the next five years")
	}
	t := Target{
		RecipientID: recipientID,
		Channel:     ch,
		WebhookURL:  webhookURL,
		TemplateID:  templateID,
		Params:      compact,
		Schedule:    sched,
		NextRunAt:   next,
		Status:      StatusActive,
	}
	if limits.RecordBytes != nil && limits.MaxRecordBytes > 0 {
		if n := limits.RecordBytes(t); n > limits.MaxRecordBytes {
			return Target{}, invalid("params", "with the other fields the notification would be a %d-byte Kafka record, over the limit of %d bytes", n, limits.MaxRecordBytes)
		}
	}
	return t, nil
}

func checkText(field, s string, max int) error {
	switch {
	case strings.TrimSpace(s) == "":
		return invalid(field, "is required")
	case len(s) > max:
		return invalid(field, "longer than %d bytes", max)
	case !utf8.ValidString(s):
		return invalid(field, "is not valid UTF-8")
	}
	return nil
}

func checkWebhookURL(raw string) error {
	if raw == "" {
		return invalid("webhook_url", "is required for channel webhook")
	}
	if len(raw) > MaxWebhookURLLen {
		return invalid("webhook_url", "longer than %d bytes", MaxWebhookURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalid("webhook_url", "must be an absolute http or https URL")
	}
	if u.User != nil {
		return invalid("webhook_url", "must not contain credentials")
	}
	return nil
}

// normalizeParams returns params as a compact JSON object.
func normalizeParams(params []byte, max int) ([]byte, error) {
	params = bytes.TrimSpace(params)
	if len(params) == 0 || bytes.Equal(params, []byte("null")) {
		return []byte("{}"), nil
	}
	if params[0] != '{' {
		return nil, invalid("params", "must be a JSON object")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, params); err != nil {
		return nil, invalid("params", "is not valid JSON: %v", err)
	}
	if max > 0 && buf.Len() > max {
		return nil, invalid("params", "%d bytes exceed the limit of %d", buf.Len(), max)
	}
	return buf.Bytes(), nil
}

// CanPause reports whether a target in status s can be paused; pausing a
// paused target is a no-op.
func (s Status) CanPause() bool { return s == StatusActive || s == StatusPaused }

// CanResume reports whether a target in status s can be resumed; resuming
// an active target is a no-op.
func (s Status) CanResume() bool { return s == StatusActive || s == StatusPaused }

// Pause returns t paused at now. Pausing a paused target changes nothing;
// a done target cannot be paused (ErrConflict).
func (t Target) Pause(now time.Time) (Target, error) {
	switch t.Status {
	case StatusPaused:
		return t, nil
	case StatusActive:
		t.Status, t.UpdatedAt = StatusPaused, now
		return t, nil
	}
	return t, fmt.Errorf("%w: cannot pause a target that is %s", ErrConflict, t.Status)
}

// Resume returns t active again with next_run_at recomputed from now: a
// cron target skips the slots that passed while it was paused; a one-shot
// keeps its due time and, if that has passed, fires at the next tick.
// Resuming an active target changes nothing; a done target cannot be
// resumed (ErrConflict).
func (t Target) Resume(now time.Time) (Target, error) {
	switch t.Status {
	case StatusActive:
		return t, nil
	case StatusPaused:
		next := t.Schedule.FirstRun(now)
		if next.IsZero() {
			t.Status = StatusDone
		} else {
			t.Status, t.NextRunAt = StatusActive, next
		}
		t.UpdatedAt = now
		return t, nil
	}
	return t, fmt.Errorf("%w: cannot resume a target that is %s", ErrConflict, t.Status)
}

// Delete returns t deleted at now; a deleted target is never claimed and no
// longer visible through the API (its outbox rows stay until published).
func (t Target) Delete(now time.Time) (Target, error) {
	t.Status, t.UpdatedAt = StatusDeleted, now
	return t, nil
}

package ports

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/notiflow/notiflow/services/scheduler/internal/app"
)

// patchRequest is a change to a target as clients send it: absent fields
// stay as they are.
type patchRequest struct {
	WebhookURL  *string         `json:"webhook_url"`
	TemplateID  *string         `json:"template_id"`
	Params      json.RawMessage `json:"params"`
	DueAt       *string         `json:"due_at"`
	Cron        *string         `json:"cron"`
	TimeZone    *string         `json:"time_zone"`
	RecipientID *string         `json:"recipient_id"`
	Channel     *string         `json:"channel"`
}

func (p patchRequest) patch() (app.TargetPatch, error) {
	switch {
	case p.RecipientID != nil:
		return app.TargetPatch{}, badRequest("recipient_id: cannot be changed (create a new target)")
	case p.Channel != nil:
		return app.TargetPatch{}, badRequest("channel: cannot be changed (create a new target)")
	case p.WebhookURL == nil && p.TemplateID == nil && p.Params == nil && p.DueAt == nil && p.Cron == nil && p.TimeZone == nil:
		return app.TargetPatch{}, badRequest("body: give at least one of webhook_url, template_id, params, due_at, cron, time_zone")
	}
	out := app.TargetPatch{WebhookURL: p.WebhookURL, TemplateID: p.TemplateID, Params: p.Params, Cron: p.Cron, TimeZone: p.TimeZone}
	if p.DueAt != nil {
		at, err := time.Parse(time.RFC3339Nano, *p.DueAt)
		if err != nil {
			return out, badRequest("due_at: must be an RFC 3339 time such as 2026-03-08T09:00:00Z")
		}
		out.DueAt = &at
	}
	return out, nil
}

// patch serves PATCH /v1/targets/{id}: it answers the changed target once
// the change is stored and its fence settled, or 503 when a send of the
// target was still in progress at the end of the wait (the change stands;
// a retry is safe).
func (a *API) patch(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var req patchRequest
	if err := decode(w, r, int64(a.opts.MaxParamsBytes)+8<<10, &req); err != nil {
		return err
	}
	p, err := req.patch()
	if err != nil {
		return err
	}
	t, err := a.targets.Patch(r.Context(), id, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view(t))
	return nil
}

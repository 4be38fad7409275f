package ports

import (
	"net/http"
	"time"
)

// rotateResponse is the answer of a rotation: the new secret, given only
// here, and until when the former one stays valid (absent when the target
// had none).
type rotateResponse struct {
	TargetID           int64      `json:"target_id"`
	WebhookSecret      string     `json:"webhook_secret"`
	PreviousValidUntil *time.Time `json:"previous_valid_until,omitempty"`
}

func (a *API) rotateSecret(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	rec, err := a.opts.Secrets.Rotate(r.Context(), id)
	if err != nil {
		return err
	}
	resp := rotateResponse{TargetID: id, WebhookSecret: rec.Current}
	if rec.Previous != "" {
		until := rec.PreviousUntil.UTC()
		resp.PreviousValidUntil = &until
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

package ports

import (
	"net/http"
	"time"
)

// parkedView is one parked outbox row as GET /admin/outbox/parked shows it.
type parkedView struct {
	OutboxID       uint64    `json:"outbox_id"`
	NotificationID string    `json:"notification_id"`
	TargetID       int64     `json:"target_id"`
	RecipientID    string    `json:"recipient_id"`
	OccurrenceAt   time.Time `json:"occurrence_at"`
	Reason         string    `json:"reason"`
	ParkedAt       time.Time `json:"parked_at"`
}

type parkedResponse struct {
	Parked    []parkedView `json:"parked"`
	NextAfter *int64       `json:"next_after,omitempty"`
}

// listParked serves a page of the parked outbox rows, in outbox id order.
func (a *API) listParked(w http.ResponseWriter, r *http.Request) error {
	after, limit, err := page(r)
	if err != nil {
		return err
	}
	ps, err := a.opts.Parked.ListParked(r.Context(), uint64(after), limit+1)
	if err != nil {
		return err
	}
	resp := parkedResponse{Parked: make([]parkedView, 0, min(len(ps), limit))}
	for _, p := range ps[:min(len(ps), limit)] {
		n := &p.Note
		resp.Parked = append(resp.Parked, parkedView{
			OutboxID: n.Sequence, NotificationID: n.ID, TargetID: n.TargetID, RecipientID: n.RecipientID,
			OccurrenceAt: n.OccurrenceAt, Reason: p.Reason, ParkedAt: p.At,
		})
	}
	if len(ps) > limit {
		next := int64(ps[limit-1].Note.Sequence)
		resp.NextAfter = &next
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

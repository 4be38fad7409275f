// Package ports is the scheduler's HTTP API: JSON over net/http, bearer
// token authentication, strict decoding and validation with clear 4xx
// messages, and the OpenAPI document that describes it (openapi.yaml).
package ports

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/notiflow/notiflow/lib/httpapi"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the API's OpenAPI 3 document.
func OpenAPI() []byte { return bytes.Clone(openAPI) }

// List page sizes.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// Options configure the API.
type Options struct {
	// Token is the bearer token every /v1 request must carry; empty
	// disables authentication (NOTIFLOW_INSECURE_NO_AUTH).
	Token string
	// MaxParamsBytes bounds params; a single create request may carry at
	// most MaxParamsBytes plus 8 KiB.
	MaxParamsBytes int
	// MaxBulkBodyBytes bounds the body of a bulk request.
	MaxBulkBodyBytes int64
	// Parked, when set, serves GET /admin/outbox/parked.
	Parked ParkedLister
	// Secrets, when set, serves POST /v1/targets/{id}/webhook-secret:rotate.
	Secrets *app.WebhookSecrets
	// Templates, when set, serves /v1/templates.
	Templates *app.Templates
}

// ParkedLister reads the outbox rows the relay parked (see app.Relay).
type ParkedLister interface {
	// ListParked returns up to limit parked rows with an outbox id above
	// afterID, in id order.
	ListParked(ctx context.Context, afterID uint64, limit int) ([]app.Parked, error)
}

// API serves the targets API.
type API struct {
	targets *app.Targets
	opts    Options
	guard   *httpapi.Guard
	tguard  *httpapi.Guard // the templates routes' (their own errors)
}

// NewAPI returns the API over the targets service.
func NewAPI(targets *app.Targets, opts Options, log *slog.Logger) *API {
	return &API{targets: targets, opts: opts, guard: httpapi.NewGuard(opts.Token, apiError, log, "api request failed"),
		tguard: httpapi.NewGuard(opts.Token, templateError, log, "templates request failed")}
}

// Mux is where Register adds routes: a Go 1.22 pattern mux
// (*http.ServeMux), or one that records what is registered.
type Mux interface {
	Handle(pattern string, handler http.Handler)
	HandleFunc(pattern string, handler func(http.ResponseWriter, *http.Request))
}

// Register adds the API's routes to mux (e.g. the one obs.Mux returns).
// Every /v1 route, and GET /admin/outbox/parked, requires the bearer
// token; the OpenAPI document is public.
func (a *API) Register(mux Mux) {
	mux.HandleFunc("GET /openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(openAPI)
	})
	mux.Handle("POST /v1/targets", a.guard.Handle(a.create))
	mux.Handle("POST /v1/targets:bulk", a.guard.Handle(a.createBulk))
	mux.Handle("GET /v1/targets", a.guard.Handle(a.list))
	mux.Handle("GET /v1/targets/{id}", a.guard.Handle(a.get))
	mux.Handle("POST /v1/targets/{id}/pause", a.guard.Handle(a.pause))
	mux.Handle("POST /v1/targets/{id}/resume", a.guard.Handle(a.resume))
	mux.Handle("DELETE /v1/targets/{id}", a.guard.Handle(a.delete))
	mux.Handle("PATCH /v1/targets/{id}", a.guard.Handle(a.patch))
	if a.opts.Parked != nil {
		mux.Handle("GET /admin/outbox/parked", a.guard.Handle(a.listParked))
	}
	if a.opts.Secrets != nil {
		mux.Handle("POST /v1/targets/{id}/webhook-secret:rotate", a.guard.Handle(a.rotateSecret))
	}
	if a.opts.Templates != nil {
		a.registerTemplates(mux)
	}
}

var (
	badRequest = httpapi.BadRequest
	writeJSON  = httpapi.WriteJSON
)

// apiError maps the targets service's errors to the status and message
// the client sees (a httpapi.ErrorMap).
func apiError(err error) (int, string, bool) {
	var (
		ve *domain.ValidationError
		be *app.BulkError
	)
	switch {
	case errors.As(err, &be):
		return http.StatusBadRequest, be.Error(), true
	case errors.As(err, &ve):
		return http.StatusBadRequest, ve.Error(), true
	case errors.Is(err, app.ErrTooMany):
		return http.StatusBadRequest, "targets: " + strings.TrimPrefix(err.Error(), app.ErrTooMany.Error()+": "), true
	case errors.Is(err, domain.ErrNotFound):
		return http.StatusNotFound, "target not found", true
	case errors.Is(err, domain.ErrConflict):
		return http.StatusConflict, conflictMessage(err), true
	case errors.Is(err, app.ErrFenceNotSettled):
		return http.StatusServiceUnavailable, err.Error() + "; retry the request", true
	}
	return 0, "", false
}

func conflictMessage(err error) string {
	s := err.Error()
	if i := strings.Index(s, domain.ErrConflict.Error()+": "); i >= 0 {
		return s[i+len(domain.ErrConflict.Error())+2:]
	}
	return domain.ErrConflict.Error()
}

// targetRequest is a target as clients send it.
type targetRequest struct {
	RecipientID string          `json:"recipient_id"`
	Channel     string          `json:"channel"`
	WebhookURL  string          `json:"webhook_url"`
	TemplateID  string          `json:"template_id"`
	Params      json.RawMessage `json:"params"`
	DueAt       string          `json:"due_at"`
	Cron        string          `json:"cron"`
	TimeZone    string          `json:"time_zone"`
}

func (t targetRequest) input(field string) (app.TargetInput, error) {
	in := app.TargetInput{
		RecipientID: t.RecipientID, Channel: t.Channel, WebhookURL: t.WebhookURL, TemplateID: t.TemplateID,
		Params: t.Params, Cron: t.Cron, TimeZone: t.TimeZone,
	}
	if t.DueAt != "" {
		at, err := time.Parse(time.RFC3339Nano, t.DueAt)
		if err != nil {
			return in, badRequest("%sdue_at: must be an RFC 3339 time such as 2026-03-08T09:00:00Z", field)
		}
		in.DueAt = &at
	}
	return in, nil
}

type bulkRequest struct {
	Targets []targetRequest `json:"targets"`
}

// bulkResponse lists the new ids in request order; WebhookSecrets, present
// when the request had webhook targets, is aligned with IDs (null for the
// targets of other channels).
type bulkResponse struct {
	Count          int       `json:"count"`
	IDs            []int64   `json:"ids"`
	WebhookSecrets []*string `json:"webhook_secrets,omitempty"`
}

// targetView is a target as clients receive it.
type targetView struct {
	ID          int64           `json:"id"`
	RecipientID string          `json:"recipient_id"`
	Channel     string          `json:"channel"`
	WebhookURL  string          `json:"webhook_url,omitempty"`
	TemplateID  string          `json:"template_id"`
	Params      json.RawMessage `json:"params"`
	DueAt       *time.Time      `json:"due_at,omitempty"`
	Cron        string          `json:"cron,omitempty"`
	TimeZone    string          `json:"time_zone,omitempty"`
	NextRunAt   time.Time       `json:"next_run_at"`
	Status      string          `json:"status"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
	// Version grows with every change (PATCH, pause, resume, delete).
	Version uint64 `json:"version"`
	// WebhookSecret is only in the answer that creates a webhook target.
	WebhookSecret string `json:"webhook_secret,omitempty"`
}

func view(t domain.Target) targetView {
	v := targetView{
		ID: t.ID, RecipientID: t.RecipientID, Channel: string(t.Channel), WebhookURL: t.WebhookURL,
		TemplateID: t.TemplateID, Params: json.RawMessage(t.Params), Cron: t.Schedule.Expr(), TimeZone: t.Schedule.Zone(),
		NextRunAt: t.NextRunAt, Status: string(t.Status), CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, Version: max(t.Version, 1),
	}
	if t.Schedule.Kind() == domain.KindOnce {
		due := t.Schedule.DueAt()
		v.DueAt = &due
	}
	if len(v.Params) == 0 {
		v.Params = json.RawMessage("{}")
	}
	return v
}

type listResponse struct {
	Targets   []targetView `json:"targets"`
	NextAfter *int64       `json:"next_after,omitempty"`
}

// decode reads one JSON value of at most limit bytes into v (see
// httpapi.Decode).
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	return httpapi.Decode(w, r, limit, v, httpapi.Hints{})
}

func (a *API) create(w http.ResponseWriter, r *http.Request) error {
	var req targetRequest
	if err := decode(w, r, int64(a.opts.MaxParamsBytes)+8<<10, &req); err != nil {
		return err
	}
	in, err := req.input("")
	if err != nil {
		return err
	}
	t, err := a.targets.Create(r.Context(), in)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/targets/"+strconv.FormatInt(t.ID, 10))
	v := view(t)
	v.WebhookSecret = t.WebhookSecret
	writeJSON(w, http.StatusCreated, v)
	return nil
}

func (a *API) createBulk(w http.ResponseWriter, r *http.Request) error {
	var req bulkRequest
	if err := decode(w, r, a.opts.MaxBulkBodyBytes, &req); err != nil {
		return err
	}
	switch {
	case len(req.Targets) == 0:
		return badRequest("targets: must contain at least one target")
	case len(req.Targets) > a.targets.BulkMax():
		return badRequest("targets: %d targets, the limit is %d", len(req.Targets), a.targets.BulkMax())
	}
	ins := make([]app.TargetInput, len(req.Targets))
	for i, t := range req.Targets {
		in, err := t.input(fmt.Sprintf("targets[%d].", i))
		if err != nil {
			return err
		}
		ins[i] = in
	}
	ts, err := a.targets.CreateBulk(r.Context(), ins)
	if err != nil {
		return err
	}
	resp := bulkResponse{Count: len(ts), IDs: make([]int64, len(ts))}
	for i, t := range ts {
		resp.IDs[i] = t.ID
		if t.WebhookSecret != "" {
			if resp.WebhookSecrets == nil {
				resp.WebhookSecrets = make([]*string, len(ts))
			}
			resp.WebhookSecrets[i] = &t.WebhookSecret
		}
	}
	writeJSON(w, http.StatusCreated, resp)
	return nil
}

func pathID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return 0, badRequest("id: must be a positive integer")
	}
	return id, nil
}

func (a *API) get(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	t, err := a.targets.Get(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view(t))
	return nil
}

// page reads the after and limit query parameters of a list request.
func page(r *http.Request) (after int64, limit int, err error) {
	q := r.URL.Query()
	after, limit = 0, DefaultListLimit
	if s := q.Get("after"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, 0, badRequest("after: must be a non-negative integer (the next_after of the previous page)")
		}
		after = n
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxListLimit {
			return 0, 0, badRequest("limit: must be an integer between 1 and %d", MaxListLimit)
		}
		limit = n
	}
	return after, limit, nil
}

func (a *API) list(w http.ResponseWriter, r *http.Request) error {
	after, limit, err := page(r)
	if err != nil {
		return err
	}
	ts, next, err := a.targets.List(r.Context(), after, limit)
	if err != nil {
		return err
	}
	resp := listResponse{Targets: make([]targetView, len(ts))}
	for i, t := range ts {
		resp.Targets[i] = view(t)
	}
	if next != 0 {
		resp.NextAfter = &next
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

func (a *API) pause(w http.ResponseWriter, r *http.Request) error {
	return a.transition(w, r, a.targets.Pause)
}

func (a *API) resume(w http.ResponseWriter, r *http.Request) error {
	return a.transition(w, r, a.targets.Resume)
}

func (a *API) transition(w http.ResponseWriter, r *http.Request, fn func(context.Context, int64) (domain.Target, error)) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	t, err := fn(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view(t))
	return nil
}

func (a *API) delete(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := a.targets.Delete(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

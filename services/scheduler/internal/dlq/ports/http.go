package ports

import (
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/notiflow/notiflow/lib/httpapi"
	"github.com/notiflow/notiflow/services/scheduler/internal/dlq"
)

const (
	// maxBodyBytes bounds a POST /admin/dlq/redrive body.
	maxBodyBytes = 4096
	// defaultLimit and maxLimit bound GET /admin/dlq's limit.
	defaultLimit, maxLimit = 100, 1000
	// defaultWindow is GET /admin/dlq's window when from is not given.
	defaultWindow = time.Hour
)

// Handler serves the dead-letter admin routes.
type Handler struct {
	svc   *dlq.Service
	guard *httpapi.Guard
}

// NewHandler serves svc; token is the API's bearer token (empty disables
// authentication, as NOTIFLOW_INSECURE_NO_AUTH does for the API).
func NewHandler(svc *dlq.Service, token string, log *slog.Logger) *Handler {
	return &Handler{svc: svc, guard: httpapi.NewGuard(token, mapError, log, "dead-letter admin request failed")}
}

// Mux is where Register adds routes: a Go 1.22 pattern mux
// (*http.ServeMux), or one that records what is registered.
type Mux interface {
	Handle(pattern string, handler http.Handler)
	HandleFunc(pattern string, handler func(http.ResponseWriter, *http.Request))
}

// Register adds the routes to mux.
func (h *Handler) Register(mux Mux) {
	mux.Handle("GET /admin/dlq", h.guard.HandleNoStore(h.list))
	mux.Handle("POST /admin/dlq/redrive", h.guard.HandleNoStore(h.redrive))
}

func mapError(err error) (int, string, bool) {
	if errors.Is(err, dlq.ErrNoSource) {
		return http.StatusBadRequest, "source: is required (" + strings.Join(dlq.Sources, " or ") + ")", true
	}
	return 0, "", false
}

// listResponse is GET /admin/dlq's answer.
type listResponse struct {
	From        time.Time    `json:"from"`
	To          time.Time    `json:"to"`
	MaxRedrives int          `json:"max_redrives"`
	Records     []dlq.Record `json:"records"`
	More        bool         `json:"more"` // more records matched than limit
}

// list answers GET /admin/dlq?from=&to=&reason=&source=&limit=: the
// window's dead letters, oldest first. to defaults to now, from to an
// hour before to.
func (h *Handler) list(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	for k := range q {
		if !slices.Contains([]string{"from", "to", "reason", "source", "limit"}, k) {
			return httpapi.BadRequest("%s: unknown parameter (known: from, to, reason, source, limit)", k)
		}
	}
	to, err := timeParam("to", q.Get("to"), time.Now().UTC())
	if err != nil {
		return err
	}
	from, err := timeParam("from", q.Get("from"), to.Add(-defaultWindow))
	if err != nil {
		return err
	}
	f, err := filter(from, to, q.Get("source"), q.Get("reason"))
	if err != nil {
		return err
	}
	limit := defaultLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxLimit {
			return httpapi.BadRequest("limit: must be an integer between 1 and %d, got %q", maxLimit, s)
		}
		limit = n
	}
	recs, more, err := h.svc.List(r.Context(), f, limit)
	if err != nil {
		return err
	}
	if recs == nil {
		recs = []dlq.Record{}
	}
	httpapi.WriteJSON(w, http.StatusOK, listResponse{From: f.From, To: f.To, MaxRedrives: h.svc.MaxRedrives(), Records: recs, More: more})
	return nil
}

// redriveRequest is POST /admin/dlq/redrive's body.
type redriveRequest struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Source string `json:"source"`
	Reason string `json:"reason"`
	DryRun bool   `json:"dry_run"`
}

func (h *Handler) redrive(w http.ResponseWriter, r *http.Request) error {
	var req redriveRequest
	err := httpapi.Decode(w, r, maxBodyBytes, &req, httpapi.Hints{
		Example: `{"from":"2026-01-02T09:00:00Z","to":"2026-01-02T10:00:00Z","source":"dispatcher","reason":"503","dry_run":true}`,
		Fields:  "from, to, source, reason, dry_run",
	})
	if err != nil {
		return err
	}
	switch {
	case req.From == "":
		return httpapi.BadRequest("from: is required (RFC 3339 time)")
	case req.To == "":
		return httpapi.BadRequest("to: is required (RFC 3339 time)")
	case req.Source == "":
		return dlq.ErrNoSource
	}
	from, err := timeParam("from", req.From, time.Time{})
	if err != nil {
		return err
	}
	to, err := timeParam("to", req.To, time.Time{})
	if err != nil {
		return err
	}
	f, err := filter(from, to, req.Source, req.Reason)
	if err != nil {
		return err
	}
	res, err := h.svc.Redrive(r.Context(), f, req.DryRun)
	if err != nil {
		return err
	}
	if res.Records == nil {
		res.Records = []dlq.Outcome{}
	}
	httpapi.WriteJSON(w, http.StatusOK, res)
	return nil
}

func timeParam(name, s string, def time.Time) (time.Time, error) {
	if s == "" {
		return def, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, httpapi.BadRequest("%s: must be an RFC 3339 time (2026-01-02T09:00:00Z), got %q", name, s)
	}
	return t.UTC(), nil
}

func filter(from, to time.Time, source, reason string) (dlq.Filter, error) {
	if !to.After(from) {
		return dlq.Filter{}, httpapi.BadRequest("to: must be after from")
	}
	if source != "" && !slices.Contains(dlq.Sources, source) {
		return dlq.Filter{}, httpapi.BadRequest("source: must be %s, got %q", strings.Join(dlq.Sources, " or "), source)
	}
	if len(reason) > 200 {
		return dlq.Filter{}, httpapi.BadRequest("reason: at most 200 characters")
	}
	return dlq.Filter{From: from.UTC(), To: to.UTC(), Source: source, Reason: reason}, nil
}

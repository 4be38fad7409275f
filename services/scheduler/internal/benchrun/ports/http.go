package ports

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/notiflow/notiflow/lib/httpapi"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
)

// maxBodyBytes bounds a POST /admin/benchmarks body.
const maxBodyBytes = 4096

// Handler serves the admin routes.
type Handler struct {
	svc   *app.Service
	guard *httpapi.Guard
	sink  SinkAPI
}

// NewHandler serves svc; token is the API's bearer token (empty disables
// authentication, as NOTIFLOW_INSECURE_NO_AUTH does for the API).
func NewHandler(svc *app.Service, token string, log *slog.Logger) *Handler {
	return &Handler{svc: svc, guard: httpapi.NewGuard(token, adminError, log, "admin request failed")}
}

// Mux is where Register adds routes: a Go 1.22 pattern mux
// (*http.ServeMux), or one that records what is registered.
type Mux interface {
	Handle(pattern string, handler http.Handler)
	HandleFunc(pattern string, handler func(http.ResponseWriter, *http.Request))
}

// Register adds the admin routes to mux.
func (h *Handler) Register(mux Mux) {
	mux.HandleFunc("GET /admin", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/admin/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /admin/{$}", servePage)
	mux.Handle("POST /admin/benchmarks", h.guard.HandleNoStore(h.start))
	mux.Handle("GET /admin/benchmarks", h.guard.HandleNoStore(h.list))
	mux.Handle("GET /admin/benchmarks/{id}", h.guard.HandleNoStore(h.get))
	mux.Handle("DELETE /admin/benchmarks/{id}", h.guard.HandleNoStore(h.cancel))
	mux.Handle("GET /admin/benchmarks/{id}/chart.svg", h.guard.HandleNoStore(h.chart))
	mux.Handle("GET /admin/notifications", h.guard.HandleNoStore(h.notifications))
}

type httpError = httpapi.Error

var (
	badRequest = httpapi.BadRequest
	writeJSON  = httpapi.WriteJSON
)

// adminError maps the benchmark service's errors to the status and
// message the client sees (a httpapi.ErrorMap).
func adminError(err error) (int, string, bool) {
	var (
		ve *domain.ValidationError
		be *app.BusyError
	)
	switch {
	case errors.As(err, &ve):
		return http.StatusBadRequest, ve.Error(), true
	case errors.As(err, &be):
		return http.StatusConflict, be.Error(), true
	case errors.Is(err, domain.ErrNotFound):
		return http.StatusNotFound, "benchmark run not found", true
	case errors.Is(err, app.ErrCancelledWhileCreating):
		return http.StatusConflict, err.Error(), true
	case errors.Is(err, app.ErrStopped):
		return http.StatusServiceUnavailable, err.Error(), true
	}
	return 0, "", false
}

// decode reads one JSON object into v (see httpapi.Decode), refusing
// bodies over maxBodyBytes.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	return httpapi.Decode(w, r, maxBodyBytes, v, httpapi.Hints{
		Example: `{"notifications":100000,"recipients":10000,"channel":"sim","sim_latency_ms":2}`,
		Fields:  "notifications, recipients, channel, sim_latency_ms, webhook_url, webhook_secret",
	})
}

var runIDPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func pathID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !runIDPattern.MatchString(id) {
		return "", &httpError{Status: http.StatusNotFound, Msg: "benchmark run not found (ids are lower-case UUIDs)"}
	}
	return id, nil
}

func (h *Handler) start(w http.ResponseWriter, r *http.Request) error {
	arrived := time.Now()
	var p domain.Params
	if err := decode(w, r, &p); err != nil {
		return err
	}
	run, err := h.svc.Start(r.Context(), p, arrived)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/admin/benchmarks/"+run.ID)
	writeJSON(w, http.StatusCreated, run)
	return nil
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) error {
	return runByID(w, r, h.svc.Get)
}

func (h *Handler) cancel(w http.ResponseWriter, r *http.Request) error {
	return runByID(w, r, h.svc.Cancel)
}

// runByID applies fn to the run the path names and answers the run fn
// returns.
func runByID(w http.ResponseWriter, r *http.Request, fn func(context.Context, string) (domain.Run, error)) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	run, err := fn(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, run)
	return nil
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) error {
	limit := 0
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 500 {
			return badRequest("limit: must be an integer between 1 and 500")
		}
		limit = n
	}
	runs, err := h.svc.List(r.Context(), limit)
	if err != nil {
		return err
	}
	if runs == nil {
		runs = []domain.Run{}
	}
	writeJSON(w, http.StatusOK, struct {
		Runs []domain.Run `json:"runs"`
	}{runs})
	return nil
}

func (h *Handler) chart(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	run, err := h.svc.Get(r.Context(), id)
	if err != nil {
		return err
	}
	if run.Report == nil || run.Report.Series == nil {
		return &httpError{Status: http.StatusConflict, Msg: fmt.Sprintf("benchmark run %s is %s and has no report yet", id, run.Status)}
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Content-Security-Policy", "default-src 'none'")
	_, err = io.WriteString(w, RenderChart(run))
	return err
}

package obs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/notiflow/notiflow/lib/config"
)

// NewLogger returns a JSON logger writing to w at the given level ("debug",
// "info", "warn", "error"), with the service name on every line.
func NewLogger(w io.Writer, service, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv})
	return slog.New(h).With("service", service), nil
}

// NewRegistry returns a Prometheus registry with the Go runtime and process
// collectors registered. Each process (and each test) uses its own registry.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Check reports whether one dependency is usable; it must return promptly
// when ctx ends.
type Check func(ctx context.Context) error

// Health is a service's liveness and readiness state. It is safe for
// concurrent use.
type Health struct {
	log      *slog.Logger
	mu       sync.RWMutex
	checks   map[string]Check
	draining atomic.Bool

	logMu  sync.Mutex
	failed map[string]loggedFailure // check name -> what was logged last
}

// NewHealth returns a Health with no checks, ready and not draining, that
// logs failing checks to log (nil: slog.Default()).
func NewHealth(log *slog.Logger) *Health {
	if log == nil {
		log = slog.Default()
	}
	return &Health{log: log, checks: map[string]Check{}, failed: map[string]loggedFailure{}}
}

// AddCheck registers a readiness check under name, replacing any earlier one.
func (h *Health) AddCheck(name string, c Check) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks[name] = c
}

// SetDraining marks the service as shutting down: /readyz answers 503 from
// now on so that traffic and rebalances move elsewhere first.
func (h *Health) SetDraining() { h.draining.Store(true) }

// Ready runs every check with a short timeout and returns the failures
// joined, or nil. It fails while draining. A check's failure is logged when
// it starts or its error changes, and its recovery once; a check failing
// the same way on every probe is logged once.
func (h *Health) Ready(ctx context.Context) error {
	if h.draining.Load() {
		return errDraining
	}
	h.mu.RLock()
	names := make([]string, 0, len(h.checks))
	checks := make(map[string]Check, len(h.checks))
	for n, c := range h.checks {
		names = append(names, n)
		checks[n] = c
	}
	h.mu.RUnlock()
	sort.Strings(names)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var errs []error
	for _, n := range names {
		err := checks[n](ctx)
		h.logChange(n, err)
		if err != nil {
			errs = append(errs, &CheckError{Name: n, Err: err})
		}
	}
	return errors.Join(errs...)
}

var errDraining = errors.New("draining")

// CheckError is one failed readiness check.
type CheckError struct {
	Name string
	Err  error
}

func (e *CheckError) Error() string { return e.Name + ": " + e.Err.Error() }
func (e *CheckError) Unwrap() error { return e.Err }

// logChange logs a check's result when it differs from the last one logged.
func (h *Health) logChange(name string, err error) {
	h.logMu.Lock()
	defer h.logMu.Unlock()
	last, failing := h.failed[name]
	now := time.Now()
	switch {
	case err == nil && failing:
		delete(h.failed, name)
		h.log.Info("readiness check recovered", "check", name)
	case err != nil && (!failing || last.text != err.Error() && now.Sub(last.at) >= failureRelog):
		h.failed[name] = loggedFailure{text: err.Error(), at: now}
		h.log.Warn("readiness check failing", "check", name, "err", err)
	}
}

// failureRelog is how often a failing check whose error text keeps
// changing (an ephemeral port, a timestamp) is logged again at most.
const failureRelog = time.Minute

// loggedFailure is a failing check's error as last logged, and when.
type loggedFailure struct {
	text string
	at   time.Time
}

// failedChecks returns what /readyz may say of err from Ready: the names
// of the failed checks, or "draining"; never an error's text.
func failedChecks(err error) string {
	if errors.Is(err, errDraining) {
		return "draining"
	}
	var names []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			var ce *CheckError
			if errors.As(e, &ce) {
				names = append(names, ce.Name)
			}
		}
	}
	return strings.Join(names, ", ")
}

// MuxPatterns are the routes Mux registers: health, readiness, metrics.
var MuxPatterns = []string{"GET /healthz", "GET /readyz", "GET /metrics"}

// Mux returns a ServeMux serving /healthz, /readyz and /metrics; callers add
// their own routes to it. /readyz answers 200 "ready" or 503 "not ready: "
// with the names of the failing checks (or "draining"), never their errors,
// which may name internal addresses: those go to Health's log.
func Mux(h *Health, reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc(MuxPatterns[0], func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc(MuxPatterns[1], func(w http.ResponseWriter, r *http.Request) {
		if err := h.Ready(r.Context()); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready: "+failedChecks(err)+"\n")
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	mux.Handle(MuxPatterns[2], promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// ServerConfig is the HTTP server part of every service's configuration.
// ReadTimeout bounds reading a request, headers and body (a client sending
// slowly is cut off); WriteTimeout bounds a request from the end of its
// headers to the end of its response, so it must cover the slowest handler
// (the scheduler's POST /admin/benchmarks creates its targets before it
// answers; pprof profiles take 30 s) and no route streams; IdleTimeout
// bounds a kept-alive connection between requests.
type ServerConfig struct {
	ReadTimeout  time.Duration `env:"NOTIFLOW_HTTP_READ_TIMEOUT" default:"30s"`
	WriteTimeout time.Duration `env:"NOTIFLOW_HTTP_WRITE_TIMEOUT" default:"2m"`
	IdleTimeout  time.Duration `env:"NOTIFLOW_HTTP_IDLE_TIMEOUT" default:"2m"`
}

// Validate reports the settings that cannot work, naming their variables.
func (c ServerConfig) Validate() error {
	var errs []error
	for _, v := range []struct {
		name string
		d    time.Duration
	}{
		{"NOTIFLOW_HTTP_READ_TIMEOUT", c.ReadTimeout},
		{"NOTIFLOW_HTTP_WRITE_TIMEOUT", c.WriteTimeout},
		{"NOTIFLOW_HTTP_IDLE_TIMEOUT", c.IdleTimeout},
	} {
		if v.d < time.Second {
			errs = append(errs, config.Errorf(v.name, "must be at least 1s, got %s", v.d))
		}
	}
	return errors.Join(errs...)
}

// LogValue shows the timeouts in a log line.
func (c ServerConfig) LogValue() slog.Value {
	return slog.GroupValue(slog.Duration("read_timeout", c.ReadTimeout),
		slog.Duration("write_timeout", c.WriteTimeout), slog.Duration("idle_timeout", c.IdleTimeout))
}

// Serve listens on addr and serves handler until ctx ends, then shuts down,
// giving in-flight requests up to grace to finish. The listener is bound
// before Serve returns an error for a bad address, so callers learn of a
// busy port at once.
func Serve(ctx context.Context, addr string, handler http.Handler, cfg ServerConfig, grace time.Duration) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ServeListener(ctx, ln, handler, cfg, grace)
}

// ServeListener is Serve on an already bound listener. Zero timeouts in
// cfg take their default tags.
func ServeListener(ctx context.Context, ln net.Listener, handler http.Handler, cfg ServerConfig, grace time.Duration) error {
	if err := config.FillZero(&cfg); err != nil {
		_ = ln.Close()
		return fmt.Errorf("http server defaults: %w", err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: min(10*time.Second, cfg.ReadTimeout),
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down http server: %w", err)
	}
	return nil
}

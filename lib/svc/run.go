package svc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/notiflow/notiflow/lib/obs"
)

// Runner runs one service's components in the order every notiflow service
// shares. Once ctx ends (or a component fails) the shutdown goes:
//
//  1. readiness goes false (/readyz answers 503, Health.SetDraining);
//  2. intake stops: each Work function stops taking new work (the consumer
//     stops fetching, the scheduler stops ticking);
//  3. drain: each Work function lets the work it took finish, within its
//     own drain timeout;
//  4. commit: each Work function makes what finished durable before it
//     returns (offsets committed, the scan lock released);
//  5. the Helpers, which in-flight work needed until then (batchers,
//     publishers), stop;
//  6. the HTTP server shuts down: it takes no new request and lets the
//     requests in flight finish (they may still use every client), so
//     /healthz and /metrics answer until the work is done;
//  7. Close closes the clients (Kafka writers, Redis, MySQL) last.
//
// Steps 2 to 4 happen inside each Work function; Runner orders the rest.
type Runner struct {
	Name   string
	Log    *slog.Logger
	Health *obs.Health
	// Work are the service's intake loops. Each runs until its ctx ends,
	// then stops taking work, drains, commits and returns (steps 2-4).
	Work []func(ctx context.Context) error
	// Helpers run until every Work function has returned.
	Helpers []func(ctx context.Context) error
	// Close closes the clients once Work, Helpers and the HTTP server have
	// returned (it is also called when Run returns early, so it runs exactly
	// once).
	Close func()
	// Listener is where HTTP is served; nil: listen on Addr.
	Listener net.Listener
	Addr     string
	Handler  http.Handler
	HTTP     obs.ServerConfig
	// ShutdownTimeout bounds the shutdown from ctx's end (or the first
	// failure) to the HTTP server's end; it is also the HTTP server's grace
	// for in-flight requests.
	ShutdownTimeout time.Duration
}

// Run runs the components until ctx ends or one fails, then shuts down in
// the order of Runner's doc. It returns the first component's error (nil
// after a clean shutdown), or an error when the shutdown takes longer than
// ShutdownTimeout.
func (r Runner) Run(ctx context.Context) error {
	var closeOnce sync.Once
	closeClients := func() {
		if r.Close != nil {
			closeOnce.Do(r.Close)
		}
	}
	defer closeClients()
	ln := r.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", r.Addr); err != nil {
			return fmt.Errorf("listen on %s (NOTIFLOW_HTTP_ADDR): %w", r.Addr, err)
		}
	}

	runCtx, fail := context.WithCancel(ctx)
	defer fail()
	var (
		errOnce  sync.Once
		firstErr error
	)
	record := func(err error) {
		if err != nil && !errors.Is(err, context.Canceled) {
			errOnce.Do(func() { firstErr = err })
			fail()
		}
	}
	helperCtx, stopHelpers := context.WithCancel(context.Background())
	defer stopHelpers()
	httpCtx, stopHTTP := context.WithCancel(context.Background())
	defer stopHTTP()

	// The work sees its ctx end only once readiness is false.
	workCtx, stopWork := context.WithCancel(context.Background())
	defer stopWork()
	go func() {
		<-runCtx.Done()
		r.Health.SetDraining() // 1.
		stopWork()
	}()
	var work, helpers sync.WaitGroup
	for _, w := range r.Work {
		work.Go(func() { record(w(workCtx)) }) // 2.-4.
	}
	for _, h := range r.Helpers {
		helpers.Go(func() { record(h(helperCtx)) })
	}
	httpDone := make(chan struct{})
	go func() {
		defer close(httpDone)
		record(obs.ServeListener(httpCtx, ln, r.Handler, r.HTTP, r.ShutdownTimeout))
	}()
	r.Log.Info(r.Name+" started", "http_addr", ln.Addr().String())

	done := make(chan struct{})
	go func() {
		defer close(done)
		work.Wait()
		stopHelpers() // 5.
		helpers.Wait()
		stopHTTP() // 6.
		<-httpDone
		closeClients() // 7.
	}()
	select {
	case <-done:
	case <-runCtx.Done():
		select {
		case <-done:
		case <-time.After(r.ShutdownTimeout):
			record(fmt.Errorf("shutdown did not finish within NOTIFLOW_SHUTDOWN_TIMEOUT (%s)", r.ShutdownTimeout))
		}
	}
	errOnce.Do(func() {}) // no later component error replaces the outcome
	return firstErr
}

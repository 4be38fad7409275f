package svc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/obs"
)

// events records what happened, in order; safe for concurrent use.
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) add(s string) { e.mu.Lock(); e.got = append(e.got, s); e.mu.Unlock() }
func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func healthz(addr string) error {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz %d", resp.StatusCode)
	}
	return nil
}

// TestRunnerShutdownOrder: once ctx ends, readiness is false before the
// work drains, helpers stop only after the work returned, HTTP answers until
// then, a request in flight finishes before the clients are closed, and the
// clients are closed last.
func TestRunnerShutdownOrder(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	health := obs.NewHealth(log)
	ln := listen(t)
	addr := ln.Addr().String()
	var ev events
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	helperDone, closeCalled, entered := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var inFlight atomic.Int32
	mux := obs.Mux(health, obs.NewRegistry())
	// /slow stands for an API request that uses the clients: it is in
	// flight across the whole drain, and then waits (bounded) for the
	// clients to be closed under it.
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, _ *http.Request) {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		close(entered)
		<-helperDone
		select {
		case <-closeCalled:
		case <-time.After(2 * time.Second):
		}
		w.WriteHeader(http.StatusOK)
	})
	r := Runner{
		Name: "test", Log: log, Health: health,
		Work: []func(context.Context) error{func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			if health.Ready(context.Background()) == nil {
				ev.add("work draining while ready")
			}
			ev.add("work drained")
			return nil
		}},
		Helpers: []func(context.Context) error{func(ctx context.Context) error {
			<-ctx.Done()
			ev.add("helper stopped")
			close(helperDone)
			return nil
		}},
		Close: func() {
			if n := inFlight.Load(); n != 0 {
				ev.add(fmt.Sprintf("clients closed under %d request(s) in flight", n))
			}
			close(closeCalled)
			if err := healthz(addr); err == nil {
				ev.add("HTTP still answering at close")
			}
			ev.add("clients closed")
		},
		Listener: ln, Handler: mux, ShutdownTimeout: 5 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-started
	slow := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/slow")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		slow <- err
	}()
	<-entered
	if err := healthz(addr); err != nil {
		t.Fatalf("HTTP before the shutdown: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancel")
	}
	want := []string{"work drained", "helper stopped", "clients closed"}
	if got := ev.list(); !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	if err := <-slow; err != nil {
		t.Fatalf("the request in flight at shutdown: %v", err)
	}
	if err := healthz(addr); err == nil {
		t.Fatal("HTTP still answers after Run returned")
	}
}

// TestRunnerComponentFailure: a failing helper stops the service: Run
// returns its error after draining the work and closing the clients once.
func TestRunnerComponentFailure(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	boom := errors.New("boom")
	var closes, drained int
	var mu sync.Mutex
	r := Runner{
		Name: "test", Log: log, Health: obs.NewHealth(log),
		Work: []func(context.Context) error{func(ctx context.Context) error {
			<-ctx.Done()
			mu.Lock()
			drained++
			mu.Unlock()
			return nil
		}},
		Helpers:  []func(context.Context) error{func(context.Context) error { return boom }},
		Close:    func() { mu.Lock(); closes++; mu.Unlock() },
		Listener: listen(t), Handler: http.NotFoundHandler(), ShutdownTimeout: 5 * time.Second,
	}
	if err := r.Run(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Run: %v, want %v", err, boom)
	}
	mu.Lock()
	defer mu.Unlock()
	if drained != 1 || closes != 1 {
		t.Fatalf("work drained %d times, clients closed %d times; want 1 and 1", drained, closes)
	}
}

// TestRunnerShutdownTimeout: work that does not drain makes Run return an
// error naming NOTIFLOW_SHUTDOWN_TIMEOUT once the timeout passes.
func TestRunnerShutdownTimeout(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	release := make(chan struct{})
	defer close(release)
	r := Runner{
		Name: "test", Log: log, Health: obs.NewHealth(log),
		Work:     []func(context.Context) error{func(context.Context) error { <-release; return nil }},
		Listener: listen(t), Handler: http.NotFoundHandler(), ShutdownTimeout: 200 * time.Millisecond,
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := r.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "NOTIFLOW_SHUTDOWN_TIMEOUT") {
		t.Fatalf("Run: %v, want the shutdown timeout", err)
	}
}

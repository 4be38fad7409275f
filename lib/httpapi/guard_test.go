package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

var errKnown = errors.New("known")

func knownOnly(err error) (int, string, bool) {
	if errors.Is(err, errKnown) {
		return http.StatusConflict, "known to the routes", true
	}
	return 0, "", false
}

func TestGuard(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		token     string // the guard's
		give      string // Authorization header
		err       error  // what the route returns
		wantCode  int
		wantBody  string
		wantRan   bool
		wantLog   bool
		challenge bool
	}{
		{name: "no header", token: "s3cret", wantCode: 401, wantBody: "missing or invalid bearer token", challenge: true},
		{name: "wrong token", token: "s3cret", give: "Bearer nope", wantCode: 401, wantBody: "missing or invalid bearer token", challenge: true},
		{name: "token without Bearer", token: "s3cret", give: "s3cret", wantCode: 401, wantBody: "missing or invalid bearer token", challenge: true},
		{name: "token prefix", token: "s3cret", give: "Bearer s3cre", wantCode: 401, wantBody: "missing or invalid bearer token", challenge: true},
		{name: "right token", token: "s3cret", give: "Bearer s3cret", wantCode: 204, wantRan: true},
		{name: "auth disabled", give: "", wantCode: 204, wantRan: true},
		{name: "Error", err: fmt.Errorf("wrapped: %w", &Error{Status: 418, Msg: "teapot"}), wantCode: 418, wantBody: "teapot", wantRan: true},
		{name: "mapped", err: fmt.Errorf("doing x: %w", errKnown), wantCode: 409, wantBody: "known to the routes", wantRan: true},
		{name: "body too large", err: &http.MaxBytesError{Limit: 10}, wantCode: 413, wantBody: "request body exceeds 10 bytes", wantRan: true},
		{name: "unknown", err: errors.New("disk on fire"), wantCode: 500, wantBody: "internal error", wantRan: true, wantLog: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			g := NewGuard(tt.token, knownOnly, slog.New(slog.NewTextHandler(&logs, nil)), "route failed")
			ran := false
			h := g.Handle(func(w http.ResponseWriter, _ *http.Request) error {
				ran = true
				if tt.err != nil {
					return tt.err
				}
				w.WriteHeader(http.StatusNoContent)
				return nil
			})
			req := httptest.NewRequest(http.MethodGet, "/x", nil)
			if tt.give != "" {
				req.Header.Set("Authorization", tt.give)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.wantCode {
				t.Errorf("status %d, want %d", rec.Code, tt.wantCode)
			}
			if tt.wantBody != "" {
				if want := `{"error":"` + tt.wantBody + `"}`; strings.TrimSpace(rec.Body.String()) != want {
					t.Errorf("body %s, want %s", rec.Body, want)
				}
			}
			if ran != tt.wantRan {
				t.Errorf("route ran %v, want %v", ran, tt.wantRan)
			}
			if got := rec.Header().Get("WWW-Authenticate") != ""; got != tt.challenge {
				t.Errorf("WWW-Authenticate set %v, want %v", got, tt.challenge)
			}
			if got := strings.Contains(logs.String(), "route failed"); got != tt.wantLog {
				t.Errorf("logged %v, want %v: %q", got, tt.wantLog, logs.String())
			}
		})
	}
}

// TestGuardClientGone: a route that fails because its client went away
// gets no answer and no log line.
func TestGuardClientGone(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	g := NewGuard("", knownOnly, slog.New(slog.NewTextHandler(&logs, nil)), "route failed")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequest(http.MethodGet, "/x", nil).WithContext(ctx)
	rec := httptest.NewRecorder()
	g.Handle(func(_ http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("query: %w", r.Context().Err())
	}).ServeHTTP(rec, req)
	if body, _ := io.ReadAll(rec.Body); len(body) != 0 || logs.Len() != 0 {
		t.Errorf("answered %q and logged %q, want neither", body, logs.String())
	}
}

func TestGuardHandleNoStore(t *testing.T) {
	t.Parallel()
	g := NewGuard("s3cret", nil, slog.New(slog.NewTextHandler(io.Discard, nil)), "route failed")
	h := g.HandleNoStore(func(w http.ResponseWriter, _ *http.Request) error {
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
	for _, auth := range []string{"Bearer s3cret", ""} {
		req := httptest.NewRequest(http.MethodGet, "/admin/x", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if got := rec.Header().Get("Cache-Control"); got != "no-store" {
			t.Errorf("auth %q: answer %d has Cache-Control %q, want no-store", auth, rec.Code, got)
		}
	}
}

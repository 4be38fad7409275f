package obs

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestReadiness(t *testing.T) {
	t.Parallel()
	h := NewHealth()
	srv := httptest.NewServer(Mux(h, NewRegistry()))
	defer srv.Close()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Fatalf("ready with no checks: got %d", code)
	}
	h.AddCheck("mysql", func(context.Context) error { return errors.New("connection refused") })
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "mysql: connection refused") {
		t.Fatalf("failing check: got %d %q", code, body)
	}
	h.AddCheck("mysql", func(context.Context) error { return nil })
	h.SetDraining()
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
		t.Fatalf("draining: got %d %q", code, body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("healthz: got %d", code)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("metrics: got %d", code)
	}
}

func TestNewLoggerRejectsBadLevel(t *testing.T) {
	t.Parallel()
	if _, err := NewLogger(io.Discard, "x", "loud"); err == nil {
		t.Fatal("want error for level loud")
	}
}

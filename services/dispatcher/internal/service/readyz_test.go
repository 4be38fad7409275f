package service

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/dispatcher/internal/config"
)

// A dispatcher whose Redis is unreachable answers /readyz with 503 and the
// name of the failing check only; the error, which names the internal
// address, goes to the log.
func TestReadyzHidesDependencyErrors(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String() // nothing listens there once closed
	_ = ln.Close()
	e := newEnv(t, func(c *config.Config) { c.RedisAddr = dead })
	var logs testkit.LogBuffer
	s, err := New(context.Background(), e.cfg, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.close)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("readyz with Redis down: %d %q, want 503", resp.StatusCode, body)
	}
	if string(body) != "not ready: redis\n" {
		t.Fatalf("readyz body %q, want %q (no error text, no address)", body, "not ready: redis\n")
	}
	if !strings.Contains(logs.String(), dead) {
		t.Fatalf("the log does not name the failing address %s:\n%s", dead, logs.String())
	}
}

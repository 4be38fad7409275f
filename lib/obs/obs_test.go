package obs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/config"
	"github.com/notiflow/notiflow/lib/testkit"
)

// /readyz answers the status and the names of failing checks, never their
// errors (which name internal addresses); the errors go to the log, once
// per change, not once per probe.
func TestReadiness(t *testing.T) {
	t.Parallel()
	var logs testkit.LogBuffer
	h := NewHealth(slog.New(slog.NewTextHandler(&logs, nil)))
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
	const secret = "dial tcp 10.20.30.40:3306: connect: connection refused"
	h.AddCheck("mysql", func(context.Context) error { return errors.New(secret) })
	for i := 0; i < 5; i++ {
		code, body := get("/readyz")
		if code != http.StatusServiceUnavailable || body != "not ready: mysql\n" {
			t.Fatalf("failing check: got %d %q, want 503 \"not ready: mysql\"", code, body)
		}
	}
	if n := strings.Count(logs.String(), "10.20.30.40:3306"); n != 1 {
		t.Fatalf("the failure was logged %d times over 5 probes, want once:\n%s", n, logs.String())
	}
	h.AddCheck("mysql", func(context.Context) error { return nil })
	if code, body := get("/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("recovered: got %d %q", code, body)
	}
	if !strings.Contains(logs.String(), "recovered") {
		t.Fatalf("the recovery was not logged:\n%s", logs.String())
	}
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

// serve runs ServeListener with cfg and handler on a loopback port until
// the test ends and returns its address.
func serve(t *testing.T, cfg ServerConfig, handler http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Go(t, func(ctx context.Context) error { return ServeListener(ctx, ln, handler, cfg, time.Second) })
	return ln.Addr().String()
}

// closedWithin reports whether the server closes conn within d: a read
// returns EOF or a reset before d passes. Bytes read meanwhile are counted.
func closedWithin(conn net.Conn, d time.Duration) (closed bool, read int64) {
	_ = conn.SetReadDeadline(time.Now().Add(d))
	n, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false, n
	}
	return true, n
}

// The server's read, write and idle timeouts cut off clients that hold a
// connection without finishing: a body sent a byte at a time (slow loris),
// a response never read, a kept-alive connection left idle.
func TestServerTimeouts(t *testing.T) {
	t.Parallel()
	cfg := ServerConfig{ReadTimeout: 500 * time.Millisecond, WriteTimeout: time.Second, IdleTimeout: 500 * time.Millisecond}
	big := bytes.Repeat([]byte("x"), 64<<20)
	addr := serve(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			_, _ = w.Write(big)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok\n")
	}))
	dial := func(t *testing.T) net.Conn {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}

	t.Run("slow loris body", func(t *testing.T) {
		t.Parallel()
		conn := dial(t)
		if _, err := io.WriteString(conn, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		defer close(stop)
		go func() { // one byte every 100ms for as long as the server listens
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := conn.Write([]byte("a")); err != nil {
						return
					}
				}
			}
		}()
		if closed, _ := closedWithin(conn, 5*time.Second); !closed {
			t.Fatal("a client sending its body a byte every 100ms still held the connection after 5s (read timeout 500ms)")
		}
	})
	t.Run("response never read", func(t *testing.T) {
		t.Parallel()
		conn := dial(t)
		if _, err := io.WriteString(conn, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		// Read nothing past the write timeout, then everything that is left.
		time.Sleep(cfg.WriteTimeout + time.Second) // the client's own stall, not a wait for an outcome
		closed, n := closedWithin(conn, 10*time.Second)
		if !closed || n >= int64(len(big)) {
			t.Fatalf("a client that stalled past the write timeout got %d of %d bytes (closed %v); want the response cut", n, len(big), closed)
		}
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		t.Parallel()
		conn := dial(t)
		if _, err := io.WriteString(conn, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("first request: %v, %v", resp, err)
		}
		_ = resp.Body.Close()
		if closed, _ := closedWithin(conn, 5*time.Second); !closed {
			t.Fatal("an idle kept-alive connection was still open after 5s (idle timeout 500ms)")
		}
	})
}

func TestNewLoggerRejectsBadLevel(t *testing.T) {
	t.Parallel()
	if _, err := NewLogger(io.Discard, "x", "loud"); err == nil {
		t.Fatal("want error for level loud")
	}
}

func TestServerConfig(t *testing.T) {
	t.Parallel()
	var c ServerConfig
	if err := config.LoadFrom(func(string) (string, bool) { return "", false }, &c); err != nil {
		t.Fatal(err)
	}
	if want := (ServerConfig{ReadTimeout: 30 * time.Second, WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute}); c != want {
		t.Fatalf("defaults %+v, want %+v", c, want)
	}
	var zero ServerConfig
	if err := config.FillZero(&zero); err != nil || zero != c {
		t.Fatalf("the zero ServerConfig that ServeListener fills is %+v (%v), want the defaults %+v", zero, err, c)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	c.ReadTimeout, c.IdleTimeout = 0, time.Millisecond
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "NOTIFLOW_HTTP_READ_TIMEOUT") || !strings.Contains(err.Error(), "NOTIFLOW_HTTP_IDLE_TIMEOUT") {
		t.Fatalf("Validate = %v, want errors naming both variables", err)
	}
}

package adapters

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

// The HTTP client's behaviour where clients differ: what it does with a
// kept-alive connection the server closed, the URL as configured, a long
// answer, and the caller giving up.

// A server that closes a kept-alive connection after answering (without
// saying so) leaves a stale connection in the pool: the next call is sent
// again on a new connection within the same attempt, reaches the server
// once, and counts as one attempt without touching the breaker.
func TestWebhookReplaysOnStaleConnection(t *testing.T) {
	t.Parallel()
	var (
		calls  atomic.Int64
		closed = make(chan struct{}, 1)
		conns  sync.Map // remote address -> true
	)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		calls.Add(1)
		conns.Store(r.RemoteAddr, true)
		if calls.Load() > 1 {
			w.WriteHeader(http.StatusOK)
			return
		}
		// Answer as if the connection stayed open, then close it.
		c, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		_ = buf.Flush()
		_ = c.Close()
		closed <- struct{}{}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	url := "http://" + ln.Addr().String() + "/hook"

	w, _ := testWebhook(t, func(o *WebhookOptions) { o.BreakerFailures = 1 })
	ctx := context.Background()
	if out, _ := w.Send(ctx, due("first", url), "b"); out.Status != notiflowv1.Status_STATUS_DELIVERED {
		t.Fatalf("first call: %+v", out)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not close the first connection")
	}
	out, err := w.Send(ctx, due("second", url), "b")
	if err != nil || out.Status != notiflowv1.Status_STATUS_DELIVERED || out.Attempts != 1 {
		t.Fatalf("call on the stale connection: %+v, %v; want delivered in 1 attempt", out, err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("server got %d calls, want 2", n)
	}
	n := 0
	conns.Range(func(any, any) bool { n++; return true })
	if n != 2 {
		t.Fatalf("calls came on %d connections, want 2 (the stale one was not answered)", n)
	}
	if st := w.CircuitState("http://" + ln.Addr().String()); st != "closed" {
		t.Fatalf("breaker %q after the replay, want closed (BreakerFailures 1)", st)
	}
}

// The request goes to the URL as the target configured it: the path
// unnormalised, the query kept, user info sent as Basic credentials.
func TestWebhookSendsTheURLAsConfigured(t *testing.T) {
	t.Parallel()
	rcv := testkit.NewReceiver(t, nil)
	w, _ := testWebhook(t, nil)
	url := strings.Replace(rcv.URL, "http://", "http://user:pa%20ss@", 1) + "/a//b/../c?token=t"
	out, err := w.Send(context.Background(), due("u", url), "b")
	if err != nil || out.Status != notiflowv1.Status_STATUS_DELIVERED {
		t.Fatalf("send: %+v, %v", out, err)
	}
	calls := rcv.Calls()
	if len(calls) != 1 {
		t.Fatalf("%d calls, want 1", len(calls))
	}
	c := calls[0]
	if c.Path != "/a//b/../c" {
		t.Errorf("path %q, want /a//b/../c", c.Path)
	}
	req := &http.Request{Header: c.Header}
	if u, p, ok := req.BasicAuth(); !ok || u != "user" || p != "pa ss" {
		t.Errorf("basic auth %q %q %v, want user / pa ss", u, p, ok)
	}
	for h, want := range map[string]string{"Idempotency-Key": "u", "User-Agent": userAgent, "Content-Type": "application/json", "Webhook-Id": "u"} {
		if got := c.Header.Get(h); got != want {
			t.Errorf("header %s = %q, want %q", h, got, want)
		}
	}
}

// An answer whose body is longer than what is read still counts by its
// status: a 2xx with a large body is delivered, a 503 with one retried.
func TestWebhookLongAnswerKeepsItsStatus(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		code := http.StatusOK
		if calls.Add(1) == 1 {
			code = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Length", "1048576")
		w.WriteHeader(code)
		_, _ = w.Write(make([]byte, 1<<20))
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	w, _ := testWebhook(t, nil)
	out, err := w.Send(context.Background(), due("long", "http://"+ln.Addr().String()+"/hook"), "b")
	if err != nil || out.Status != notiflowv1.Status_STATUS_DELIVERED || out.Attempts != 2 || calls.Load() != 2 {
		t.Fatalf("send: %+v, %v after %d calls; want delivered on the second attempt", out, err, calls.Load())
	}
}

// An attempt ends when its context does, without waiting for the answer.
func TestWebhookAttemptEndsWithContext(t *testing.T) {
	t.Parallel()
	rcv := testkit.NewReceiver(t, nil)
	rcv.SetHanging(true)
	t.Cleanup(func() { rcv.SetHanging(false) })
	w, _ := testWebhook(t, func(o *WebhookOptions) { o.AttemptTimeout, o.MaxElapsed = 30*time.Second, time.Minute })
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for rcv.Held() == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	start := time.Now()
	_, err := w.Send(ctx, due("held", rcv.URL+"/hook"), "b")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("send: %v, want context.Canceled", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("send returned %s after the cancel's start, want at once", el)
	}
}

// An https endpoint's certificate is verified: one signed by an unknown
// authority is a failed attempt, nothing delivered.
func TestWebhookVerifiesCertificates(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	w, _ := testWebhook(t, nil)
	out, err := w.Send(context.Background(), due("tls", srv.URL+"/hook"), "b")
	if err != nil || out.Status != notiflowv1.Status_STATUS_FAILED || !strings.Contains(out.Err, "certificate") {
		t.Fatalf("send to an unknown authority's certificate: %+v, %v; want failed on the certificate", out, err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the endpoint got %d calls, want none", n)
	}
}

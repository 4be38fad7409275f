package adapters

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
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
	got := make(chan *http.Request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got <- r
	}))
	t.Cleanup(srv.Close)
	w, _ := testWebhook(t, nil)
	url := strings.Replace(srv.URL, "http://", "http://user:pa%20ss@", 1) + "/a//b/../c?token=t&x=%2F"
	out, err := w.Send(context.Background(), due("u", url), "b")
	if err != nil || out.Status != notiflowv1.Status_STATUS_DELIVERED {
		t.Fatalf("send: %+v, %v", out, err)
	}
	r := <-got
	if r.URL.Path != "/a//b/../c" || r.URL.RawQuery != "token=t&x=%2F" {
		t.Errorf("path %q, query %q; want /a//b/../c and token=t&x=%%2F", r.URL.Path, r.URL.RawQuery)
	}
	if u, p, ok := r.BasicAuth(); !ok || u != "user" || p != "pa ss" {
		t.Errorf("basic auth %q %q %v, want user / pa ss", u, p, ok)
	}
	for h, want := range map[string]string{"Idempotency-Key": "u", "User-Agent": userAgent, "Content-Type": "application/json", "Webhook-Id": "u"} {
		if got := r.Header.Get(h); got != want {
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

// A send whose context ends during an attempt lets that attempt run to
// its deadline (no request of the send is left in flight once Send
// returned), makes no other attempt and returns the context's error.
func TestWebhookCancelledSendFinishesItsAttempt(t *testing.T) {
	t.Parallel()
	rcv := testkit.NewReceiver(t, nil)
	rcv.SetHanging(true)
	t.Cleanup(func() { rcv.SetHanging(false) })
	const attemptTimeout = 500 * time.Millisecond
	w, _ := testWebhook(t, func(o *WebhookOptions) { o.AttemptTimeout, o.MaxElapsed = attemptTimeout, time.Minute })
	ctx, cancel := context.WithCancel(context.Background())
	held := make(chan time.Time, 1)
	go func() {
		defer cancel()
		testkit.Eventually(t, 5*time.Second, func() error {
			if rcv.Held() == 0 {
				return testkit.Errorf("no request held yet")
			}
			return nil
		})
		held <- time.Now()
	}()
	start := time.Now()
	_, err := w.Send(ctx, due("held", rcv.URL+"/hook"), "b")
	end := time.Now()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("send: %v, want context.Canceled", err)
	}
	if at := <-held; end.Before(start.Add(attemptTimeout)) || end.Sub(at) > 5*time.Second {
		t.Fatalf("send returned %s after it started and %s after the cancel; want after the attempt's %s deadline, soon after the cancel",
			end.Sub(start), end.Sub(at), attemptTimeout)
	}
	if n := rcv.Held(); n != 1 {
		t.Fatalf("%d requests made, want the one attempt", n)
	}
}

// An https endpoint that accepts connections but never answers the TLS
// handshake fails the attempt by its deadline.
func TestWebhookTLSHandshakeHasADeadline(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn // held open, silent
	)
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	w, _ := testWebhook(t, func(o *WebhookOptions) { o.AttemptTimeout, o.MaxElapsed = 300*time.Millisecond, 300*time.Millisecond })
	done := make(chan domainOutcome, 1)
	go func() {
		out, err := w.Send(context.Background(), due("tls", "https://"+ln.Addr().String()+"/hook"), "b")
		done <- domainOutcome{out.Status, out.Err, err}
	}()
	select {
	case o := <-done:
		if o.err != nil || o.status != notiflowv1.Status_STATUS_FAILED || !strings.Contains(o.text, "no answer within") {
			t.Fatalf("send: %v %q %v; want failed with no answer", o.status, o.text, o.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("send still waiting on the TLS handshake after 10 s (attempt timeout 300ms)")
	}
}

type domainOutcome struct {
	status notiflowv1.Status
	text   string
	err    error
}

// Requests waiting for one of an endpoint's connections get a new one when
// another closes (answers with Connection: close): every send is delivered
// in one attempt.
func TestWebhookWaitingRequestsGetNewConnections(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		calls.Add(1)
		time.Sleep(5 * time.Millisecond) // a queue forms behind the one connection
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	w, _ := testWebhook(t, func(o *WebhookOptions) { o.MaxConnsPerHost, o.BreakerFailures = 1, 1000 })
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			out, err := w.Send(context.Background(), due(strconv.Itoa(i), srv.URL+"/hook"), "b")
			if err != nil || out.Status != notiflowv1.Status_STATUS_DELIVERED || out.Attempts != 1 {
				t.Errorf("send %d: %+v, %v; want delivered in 1 attempt", i, out, err)
			}
		})
	}
	wg.Wait()
	if n := calls.Load(); n != 8 {
		t.Fatalf("endpoint got %d calls, want 8", n)
	}
}

// An answer with large headers (here 32 KiB of them) counts by its status.
func TestWebhookAnswerWithLargeHeaders(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for i := range 8 {
			w.Header().Set("X-Large-"+strconv.Itoa(i), strings.Repeat("v", 4<<10))
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	w, _ := testWebhook(t, nil)
	out, err := w.Send(context.Background(), due("hdr", srv.URL+"/hook"), "b")
	if err != nil || out.Status != notiflowv1.Status_STATUS_DELIVERED || out.Attempts != 1 {
		t.Fatalf("send: %+v, %v; want delivered in 1 attempt", out, err)
	}
}

// A 2xx whose body is cut short (the connection closes before its
// announced length) is delivered: the answer counts from its status.
func TestWebhookCutAnswerBodyKeepsItsStatus(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		calls.Add(1)
		c, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
		_ = buf.Flush()
		_ = c.Close()
	}))
	t.Cleanup(srv.Close)
	w, _ := testWebhook(t, nil)
	out, err := w.Send(context.Background(), due("cut", srv.URL+"/hook"), "b")
	if err != nil || out.Status != notiflowv1.Status_STATUS_DELIVERED || out.Attempts != 1 || calls.Load() != 1 {
		t.Fatalf("send: %+v, %v after %d calls; want delivered by the one call", out, err, calls.Load())
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

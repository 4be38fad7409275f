package receiver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/bench/receiver"
	"github.com/notiflow/notiflow/lib/webhooksig"
)

// call posts body to url as the dispatcher does: Idempotency-Key key (none
// when empty) and the Standard Webhooks headers signed with secret by
// lib/webhooksig, the dispatcher's signer. It returns the status.
func call(t *testing.T, url, key, secret string, body []byte, tamper bool) int {
	t.Helper()
	code, err := send(url, key, secret, body, tamper)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// send posts body to the receiver at url as the dispatcher does, signed
// with secret (over a changed body when tamper), and returns the status.
func send(url, key, secret string, body []byte, tamper bool) (int, error) {
	req, err := buildRequest(url, key, secret, body, tamper)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// buildRequest is the dispatcher's call of key (no Idempotency-Key when
// empty) with body, signed with secret (over a changed body when tamper).
func buildRequest(url, key, secret string, body []byte, tamper bool) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/hook", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	k, err := webhooksig.Decode(secret)
	if err != nil {
		return nil, err
	}
	signed := body
	if tamper {
		signed = append([]byte("x"), body...)
	}
	webhooksig.SetHeaders(req.Header, [][]byte{k}, key, time.Now(), signed)
	return req, nil
}

func stats(t *testing.T, url string) receiver.Stats {
	t.Helper()
	resp, err := http.Get(url + receiver.PathStats)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s receiver.Stats
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /stats: %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// start serves a new receiver answering after delay, with a new secret,
// until the test ends; it returns the receiver, its secret and base URL.
func start(t *testing.T, delay time.Duration) (*receiver.Receiver, string, string) {
	t.Helper()
	sec := secret(t)
	r, err := receiver.New(sec, delay)
	if err != nil {
		t.Fatal(err)
	}
	return r, sec, serve(t, r)
}

// serve runs r's server on a loopback port until the test ends and returns
// its base URL.
func serve(t *testing.T, r *receiver.Receiver) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := r.Server()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := srv.Shutdown(); err != nil {
			t.Errorf("shut the receiver down: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func secret(t *testing.T) string {
	t.Helper()
	s, err := webhooksig.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestReceiverCounts drives a receiver over real HTTP with a valid call,
// a duplicate, a call without key, a tampered and a wrongly keyed call,
// and reads its counters back through GET /stats.
func TestReceiverCounts(t *testing.T) {
	t.Parallel()
	sec := secret(t)
	delay := 20 * time.Millisecond
	r, err := receiver.New(sec, delay)
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, r)
	if resp, err := http.Get(url + receiver.PathReady); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /readyz: %v %v", resp, err)
	}
	if s := stats(t, url); s != (receiver.Stats{}) {
		t.Fatalf("stats before any call = %+v", s)
	}
	body := []byte(`{"notification_id":"n-1","body":"hello"}`)

	start := time.Now()
	if code := call(t, url, "n-1", sec, body, false); code != http.StatusOK {
		t.Fatalf("valid call: %d, want 200", code)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("valid call answered after %s, before the %s delay", took, delay)
	}
	if code := call(t, url, "n-2", sec, body, false); code != http.StatusOK {
		t.Fatalf("second key: %d, want 200", code)
	}
	if code := call(t, url, "n-1", sec, body, false); code != http.StatusOK {
		t.Fatalf("duplicate: %d, want 200 (a receiver keeps its answer)", code)
	}
	if code := call(t, url, "", sec, body, false); code != http.StatusBadRequest {
		t.Fatalf("no key: %d, want 400", code)
	}
	if code := call(t, url, "n-3", sec, body, true); code != http.StatusUnauthorized {
		t.Fatalf("tampered body: %d, want 401", code)
	}
	if code := call(t, url, "n-4", secret(t), body, false); code != http.StatusUnauthorized {
		t.Fatalf("another secret: %d, want 401", code)
	}
	// An unsigned call.
	req, _ := http.NewRequest(http.MethodPost, url+"/hook", bytes.NewReader(body))
	req.Header.Set("Idempotency-Key", "n-5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unsigned call: %d, want 401", resp.StatusCode)
	}

	s := stats(t, url)
	if s.FirstAt.IsZero() || s.LastAt.Before(s.FirstAt) || s.FirstAt.Before(start.Add(-time.Second)) {
		t.Errorf("first/last call at %s / %s (test started %s)", s.FirstAt, s.LastAt, start)
	}
	s.FirstAt, s.LastAt = time.Time{}, time.Time{}
	want := receiver.Stats{Calls: 7, Distinct: 2, Duplicates: 1, MissingIdempotencyKey: 1, BadSignatures: 3}
	if s != want {
		t.Fatalf("stats = %+v, want %+v", s, want)
	}
}

// TestReceiverCountsOverlappingDuplicates: two calls of one key in flight
// at once (a double send, as a rebalance could make one) are one
// occurrence and one duplicate, however they interleave.
func TestReceiverCountsOverlappingDuplicates(t *testing.T) {
	t.Parallel()
	_, sec, url := start(t, 300*time.Millisecond)
	body := []byte(`{"notification_id":"n-9","body":"hello"}`)
	type answer struct {
		code int
		err  error
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			code, err := send(url, "n-9", sec, body, false)
			answers <- answer{code, err}
		}()
	}
	for range 2 {
		if a := <-answers; a.err != nil || a.code != http.StatusOK {
			t.Fatalf("call: %d %v, want 200", a.code, a.err)
		}
	}
	s := stats(t, url)
	if s.Calls != 2 || s.Distinct != 1 || s.Duplicates != 1 {
		t.Fatalf("stats = %+v, want 2 calls, 1 distinct, 1 duplicate", s)
	}
}

func TestNewRefusesBadSettings(t *testing.T) {
	t.Parallel()
	if _, err := receiver.New("hunter2", 0); err == nil {
		t.Error("New accepted a secret without whsec_")
	}
	if _, err := receiver.New(secret(t), -time.Millisecond); err == nil {
		t.Error("New accepted a negative delay")
	}
}

// TestReceiverCountsACallItsClientGaveUpOn: a call whose client stopped
// waiting before the delay passed was still acted on, so the same key sent
// again is a duplicate.
func TestReceiverCountsACallItsClientGaveUpOn(t *testing.T) {
	t.Parallel()
	r, sec, url := start(t, 300*time.Millisecond)
	body := []byte(`{"notification_id":"n-7","body":"hello"}`)
	req, err := buildRequest(url, "n-7", sec, body, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gaveUp := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err == nil {
			resp.Body.Close()
		}
		gaveUp <- err
	}()
	waitFor(t, r, "the call in flight", func(s receiver.Stats) bool { return s.InFlight == 1 })
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned call: %v, want the client's cancellation", err)
	}
	waitFor(t, r, "the abandoned call answered", func(s receiver.Stats) bool { return s.InFlight == 0 && s.Distinct == 1 })
	if code := call(t, url, "n-7", sec, body, false); code != http.StatusOK {
		t.Fatalf("call sent again: %d, want 200", code)
	}
	if s := r.Stats(); s.Calls != 2 || s.Distinct != 1 || s.Duplicates != 1 {
		t.Fatalf("stats = %+v, want 2 calls, 1 distinct, 1 duplicate", s)
	}
}

// TestReceiverRefusesALargeBodyUnread: a call announcing a body over 1 MiB
// is answered 413 from its headers alone and not counted.
func TestReceiverRefusesALargeBodyUnread(t *testing.T) {
	t.Parallel()
	r, _, url := start(t, 0)
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// The headers only: the answer must come without the body being sent.
	if _, err := fmt.Fprintf(conn, "POST /hook HTTP/1.1\r\nHost: receiver\r\nIdempotency-Key: n-8\r\nContent-Length: %d\r\n\r\n", 1<<20+1); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("body over 1 MiB: %d, want 413", resp.StatusCode)
	}
	if s := r.Stats(); s.Calls != 0 {
		t.Fatalf("stats = %+v, want the refused call not counted", s)
	}
}

// waitFor polls r's counters until ok holds, failing the test after 5 s.
func waitFor(t *testing.T, r *receiver.Receiver, what string, ok func(receiver.Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s := r.Stats(); !ok(s); s = r.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: stats = %+v after 5s", what, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

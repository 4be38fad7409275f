package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Call is one webhook request a Receiver got.
type Call struct {
	NotificationID string    `json:"notification_id"`
	RecipientID    string    `json:"recipient_id"`
	TemplateID     string    `json:"template_id"`
	Body           string    `json:"body"`
	OccurrenceAt   string    `json:"occurrence_at"`
	Sequence       uint64    `json:"sequence"`
	IdempotencyKey string    `json:"-"`
	Path           string    `json:"-"`
	Status         int       `json:"-"` // what the receiver answered
	At             time.Time `json:"-"` // when it arrived
	// Header and Raw are the request's headers and body as received.
	Header http.Header `json:"-"`
	Raw    []byte      `json:"-"`
}

// Respond chooses the status code of a call; n counts the calls on the
// call's path so far, this one included.
type Respond func(c Call, n int) int

// Receiver is a real webhook endpoint on a loopback port that records
// every call (a body that is not JSON is answered 400 and not recorded).
// It answers what Respond says (200 without one), 503 while failing is
// switched on, and nothing while hanging is (SetHanging). It is safe for
// concurrent use.
type Receiver struct {
	// URL is the receiver's base address, http://host:port; any path
	// under it is served.
	URL string

	srv     *http.Server
	respond Respond
	failing atomic.Bool
	held    atomic.Int64 // requests held while hanging, in all
	mu      sync.Mutex
	hang    chan struct{} // closed when hanging is switched off; nil while off
	perPath map[string]int
	calls   []Call
}

// StartReceiver starts a Receiver on a free loopback port; respond may be
// nil (always 200). Close stops it.
func StartReceiver(respond Respond) (*Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("receiver: listen: %w", err)
	}
	r := &Receiver{URL: "http://" + ln.Addr().String(), respond: respond, perPath: map[string]int{}}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// NewReceiver is StartReceiver for a test: it fails the test when the
// receiver cannot start and closes it when the test ends.
func NewReceiver(tb testing.TB, respond Respond) *Receiver {
	tb.Helper()
	r, err := StartReceiver(respond)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = r.Close() })
	return r
}

// SetFailing makes the receiver answer 503 (true) or as usual (false).
func (r *Receiver) SetFailing(on bool) { r.failing.Store(on) }

// SetHanging makes the receiver a dead endpoint (true): every request is
// held, unanswered, until its caller gives up or hanging is switched off
// (false); then it is answered 503 and recorded as such, so a held request
// never counts as delivered.
func (r *Receiver) SetHanging(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case on && r.hang == nil:
		r.hang = make(chan struct{})
	case !on && r.hang != nil:
		close(r.hang)
		r.hang = nil
	}
}

// Held returns how many requests have been held while hanging, in all.
func (r *Receiver) Held() int64 { return r.held.Load() }

// ServeHTTP records the call and answers.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	data, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	var c Call
	if err := json.Unmarshal(data, &c); err != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	c.IdempotencyKey = req.Header.Get("Idempotency-Key")
	c.Header, c.Raw = req.Header.Clone(), data
	c.Path = req.URL.Path
	c.At = time.Now()
	r.mu.Lock()
	hang := r.hang
	r.perPath[c.Path]++
	n := r.perPath[c.Path]
	r.mu.Unlock()
	c.Status = http.StatusOK
	if hang != nil {
		r.held.Add(1)
		select {
		case <-hang:
		case <-req.Context().Done():
		}
		c.Status = http.StatusServiceUnavailable
	} else if r.respond != nil {
		c.Status = r.respond(c, n)
	}
	if r.failing.Load() {
		c.Status = http.StatusServiceUnavailable
	}
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	w.WriteHeader(c.Status)
}

// Calls returns a copy of every call so far, in arrival order.
func (r *Receiver) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...)
}

// Close stops the receiver, letting requests in flight finish for up to
// five seconds.
func (r *Receiver) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.srv.Shutdown(ctx)
}

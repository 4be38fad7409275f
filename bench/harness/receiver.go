package harness

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Call is one webhook request the receiver got.
type Call struct {
	Key            string // Idempotency-Key header
	NotificationID string `json:"notification_id"`
	RecipientID    string `json:"recipient_id"`
	Sequence       uint64 `json:"sequence"`
	At             time.Time
	Status         int // what the receiver answered
}

// Receiver is a webhook endpoint that records every call. It answers 200,
// or 503 while failing is switched on; while hanging is switched on it
// answers nothing (see SetHanging). Safe for concurrent use.
type Receiver struct {
	srv     *http.Server
	ln      net.Listener
	failing atomic.Bool
	held    atomic.Int64 // requests held while hanging, in all
	mu      sync.Mutex
	hang    chan struct{} // closed when hanging is switched off; nil while off
	calls   []Call
}

// StartReceiver listens on a free loopback port.
func StartReceiver() (*Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Receiver{ln: ln}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// URL is the receiver's address.
func (r *Receiver) URL() string { return "http://" + r.ln.Addr().String() + "/hook" }

// SetFailing makes the receiver answer 503 (true) or 200 (false).
func (r *Receiver) SetFailing(on bool) { r.failing.Store(on) }

// SetHanging makes the receiver a dead endpoint (true): every request is
// held, unanswered and unprocessed, until its caller gives up or hanging is
// switched off (false); then it is answered 503 and recorded as such, so a
// held request never counts as delivered.
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
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	c := Call{Key: req.Header.Get("Idempotency-Key"), At: time.Now(), Status: http.StatusOK}
	_ = json.Unmarshal(body, &c)
	r.mu.Lock()
	hang := r.hang
	r.mu.Unlock()
	if hang != nil {
		r.held.Add(1)
		select {
		case <-hang:
		case <-req.Context().Done():
		}
		c.Status = http.StatusServiceUnavailable
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

// Close stops the receiver.
func (r *Receiver) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.srv.Shutdown(ctx)
}

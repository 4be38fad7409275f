package receiver

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// DefaultDelay is how long a call waits for its answer unless told: the
// sim channel's default latency, so that the two channels compare at the
// same provider latency.
const DefaultDelay = 2 * time.Millisecond

// maxBody bounds the body of a call that is read.
const maxBody = 1 << 20

// SecretEnv is the environment variable the receiver process
// (notiflow-bench receive) reads its secret from: never its command line,
// which other users of the machine can read.
const SecretEnv = "NOTIFLOW_BENCH_RECEIVER_SECRET"

// Paths the receiver serves besides the webhook calls (any other path).
const (
	PathStats = "/stats"
	PathReady = "/readyz"
)

// Stats are the receiver's counters since it started (GET /stats).
type Stats struct {
	// Calls is every webhook request received, answered or not yet.
	Calls int64 `json:"calls"`
	// Distinct is the number of distinct Idempotency-Keys answered 2xx:
	// the distinct occurrences delivered.
	Distinct int64 `json:"distinct"`
	// Duplicates counts the calls answered 2xx whose key had already been
	// answered 2xx, before they arrived or while they were in flight (a
	// receiver keeps its answer).
	Duplicates int64 `json:"duplicates"`
	// MissingIdempotencyKey counts the calls without the header (answered
	// 400).
	MissingIdempotencyKey int64 `json:"missingIdempotencyKey"`
	// BadSignatures counts the calls whose Standard Webhooks headers do
	// not verify with the secret (answered 401).
	BadSignatures int64 `json:"badSignatures"`
	// InFlight is the number of calls not answered yet.
	InFlight int64 `json:"inFlight"`
	// FirstAt and LastAt are when the first and the latest call arrived
	// (zero before the first).
	FirstAt time.Time `json:"firstAt"`
	LastAt  time.Time `json:"lastAt"`
}

// Receiver is the benchmark's webhook endpoint, an http.Handler. Every path
// but PathStats and PathReady takes webhook calls (POST). It is safe for
// concurrent use.
type Receiver struct {
	verifier *standardwebhooks.Webhook
	delay    time.Duration

	calls, duplicates, missing, bad, inFlight atomic.Int64
	firstAt, lastAt                           atomic.Int64 // Unix nanoseconds

	mu       sync.Mutex
	answered map[string]struct{} // keys answered 2xx
}

// New returns a Receiver verifying signatures with secret (whsec_...) and
// answering each valid call after delay.
func New(secret string, delay time.Duration) (*Receiver, error) {
	if delay < 0 {
		return nil, fmt.Errorf("receiver delay %s is negative", delay)
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, fmt.Errorf("receiver secret: %w", err)
	}
	return &Receiver{verifier: wh, delay: delay, answered: map[string]struct{}{}}, nil
}

// Stats returns the counters now.
func (r *Receiver) Stats() Stats {
	r.mu.Lock()
	distinct := int64(len(r.answered))
	r.mu.Unlock()
	s := Stats{
		Calls: r.calls.Load(), Distinct: distinct, Duplicates: r.duplicates.Load(),
		MissingIdempotencyKey: r.missing.Load(), BadSignatures: r.bad.Load(), InFlight: r.inFlight.Load(),
	}
	if f := r.firstAt.Load(); f != 0 {
		s.FirstAt, s.LastAt = time.Unix(0, f).UTC(), time.Unix(0, r.lastAt.Load()).UTC()
	}
	return s
}

// ServeHTTP answers GET PathStats (the Stats as JSON), GET PathReady (200),
// and every other request as a webhook call: 400 without an
// Idempotency-Key, 401 when the signature does not verify, else 200 after
// the delay (a call whose client goes away meanwhile is not answered and
// its key not marked answered).
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	switch req.URL.Path {
	case PathStats:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(r.Stats())
		return
	case PathReady:
		w.WriteHeader(http.StatusOK)
		return
	}
	now := time.Now().UnixNano()
	r.calls.Add(1)
	r.firstAt.CompareAndSwap(0, now)
	r.lastAt.Store(now)
	r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	body, err := io.ReadAll(io.LimitReader(req.Body, maxBody))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	key := req.Header.Get("Idempotency-Key")
	if key == "" {
		r.missing.Add(1)
		http.Error(w, "missing Idempotency-Key", http.StatusBadRequest)
		return
	}
	if err := r.verifier.Verify(body, req.Header); err != nil {
		r.bad.Add(1)
		http.Error(w, "signature: "+err.Error(), http.StatusUnauthorized)
		return
	}
	if r.delay > 0 {
		t := time.NewTimer(r.delay)
		select {
		case <-t.C:
		case <-req.Context().Done():
			t.Stop()
			return
		}
	}
	// Checked and marked at the answer, in one step: two calls of one key
	// that overlap both reach here, and the second is a duplicate; a call
	// its client gave up on (a timeout, retried) never does.
	r.mu.Lock()
	_, seen := r.answered[key]
	r.answered[key] = struct{}{}
	r.mu.Unlock()
	if seen {
		r.duplicates.Add(1)
	}
	w.WriteHeader(http.StatusOK)
}

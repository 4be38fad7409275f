package receiver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/valyala/fasthttp"
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
	// Calls is every webhook request that reached the handler, answered or
	// not yet; a request refused while it was read (a body over 1 MiB,
	// malformed HTTP) is not counted.
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

// Receiver is the benchmark's webhook endpoint, served by Server. Every
// path but PathStats and PathReady takes webhook calls (POST). It is safe
// for concurrent use.
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

// Server returns a fasthttp server that serves r: GET PathStats (the
// Stats as JSON), GET PathReady (200), and every other request as a webhook
// call: 400 without an Idempotency-Key, 401 when the signature does not
// verify, else 200 after the delay. fasthttp rather than net/http: the
// receiver shares the machine's cores with the pipeline it measures, and
// fasthttp's server costs about two thirds of net/http's CPU per call.
//
// A call counts as answered once its delay has passed and its key is then
// marked, whether or not its client still waits (fasthttp does not tell a
// handler that its client left): a call sent again after its client gave
// up on it (a timeout, with a delay near or above the dispatcher's
// attempt timeout) counts as a duplicate, as it is for a receiver that
// acted on the first call. A body announced over 1 MiB (Content-Length) is
// refused with 413 before it is read; the connection is then closed, so a
// client still sending the body may see a reset instead of the answer.
// Other requests that cannot be read are answered 408 (read timeout), 431
// (headers too large) or 400.
func (r *Receiver) Server() *fasthttp.Server {
	return &fasthttp.Server{
		Handler:               r.handle,
		MaxRequestBodySize:    maxBody,
		ReadTimeout:           2 * time.Minute,
		IdleTimeout:           2 * time.Minute,
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		NoDefaultContentType:  true,
		CloseOnShutdown:       true,
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) {
			if errors.Is(err, fasthttp.ErrBodyTooLarge) {
				ctx.Error("body over 1 MiB", fasthttp.StatusRequestEntityTooLarge)
				return
			}
			var small *fasthttp.ErrSmallBuffer
			var nerr net.Error
			switch {
			case errors.As(err, &small):
				ctx.Error("request headers too large", fasthttp.StatusRequestHeaderFieldsTooLarge)
			case errors.As(err, &nerr) && nerr.Timeout():
				ctx.Error("request timeout", fasthttp.StatusRequestTimeout)
			default:
				ctx.Error("bad request: "+err.Error(), fasthttp.StatusBadRequest)
			}
		},
	}
}

// handle serves one request (see Server).
func (r *Receiver) handle(ctx *fasthttp.RequestCtx) {
	switch string(ctx.Path()) {
	case PathStats:
		ctx.SetContentType("application/json")
		_ = json.NewEncoder(ctx).Encode(r.Stats())
		return
	case PathReady:
		ctx.SetStatusCode(fasthttp.StatusOK)
		return
	}
	now := time.Now().UnixNano()
	r.calls.Add(1)
	r.firstAt.CompareAndSwap(0, now)
	r.lastAt.Store(now)
	r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	key := string(ctx.Request.Header.Peek("Idempotency-Key"))
	if key == "" {
		r.missing.Add(1)
		ctx.Error("missing Idempotency-Key", fasthttp.StatusBadRequest)
		return
	}
	h := http.Header{}
	for _, name := range []string{standardwebhooks.HeaderWebhookID, standardwebhooks.HeaderWebhookTimestamp, standardwebhooks.HeaderWebhookSignature} {
		if v := ctx.Request.Header.Peek(name); len(v) > 0 {
			h.Set(name, string(v))
		}
	}
	if err := r.verifier.Verify(ctx.PostBody(), h); err != nil {
		r.bad.Add(1)
		ctx.Error("signature: "+err.Error(), fasthttp.StatusUnauthorized)
		return
	}
	if r.delay > 0 {
		time.Sleep(r.delay)
	}
	// Checked and marked at the answer, in one step: two calls of one key
	// that overlap both reach here, and the second is a duplicate.
	r.mu.Lock()
	_, seen := r.answered[key]
	r.answered[key] = struct{}{}
	r.mu.Unlock()
	if seen {
		r.duplicates.Add(1)
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
}

package adapters

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"

	"github.com/notiflow/notiflow/lib/consume"
	"github.com/notiflow/notiflow/lib/netguard"
	"github.com/notiflow/notiflow/lib/webhooksig"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/dispatcher/internal/domain"
)

// WebhookOptions configure a Webhook.
type WebhookOptions struct {
	// AttemptTimeout bounds one HTTP request; MaxElapsed all attempts and
	// waits of one notification together.
	AttemptTimeout, MaxElapsed time.Duration
	// BackoffMin and BackoffMax shape the waits between attempts
	// (exponential with jitter).
	BackoffMin, BackoffMax time.Duration
	// BreakerFailures consecutive failures open an endpoint's circuit;
	// after BreakerCooldown one trial request is let through.
	BreakerFailures int
	BreakerCooldown time.Duration
	// Allow lists CIDRs, IPs and host names exempt from the SSRF guard.
	Allow []string
	// MaxConnsPerHost bounds the connections to one endpoint.
	MaxConnsPerHost int
	// Latency observes each request's duration by outcome ("2xx", "4xx",
	// "5xx", "error"); CircuitState gets 0/1/2 (closed/half-open/open) per
	// endpoint, for a bounded set of endpoints (see breakers). Either may
	// be nil.
	Latency      *prometheus.HistogramVec
	CircuitState *prometheus.GaugeVec
	// CircuitIdle and CircuitSeries bound the breakers and the CircuitState
	// series (see breakers). Zero: DefaultCircuitIdle, DefaultCircuitSeries.
	CircuitIdle   time.Duration
	CircuitSeries int
	// Keys gives the signing keys of each attempt; nil sends no
	// webhook-signature header.
	Keys KeySource
}

// KeySource gives the keys a notification's webhook is signed with (none:
// unsigned). An error means the webhook must not be sent yet; it is
// retried within MaxElapsed. *Secrets implements it.
type KeySource interface {
	Keys(ctx context.Context, due *notiflowv1.NotificationDue) ([][]byte, error)
}

// Defaults of WebhookOptions.
const (
	DefaultCircuitIdle   = 10 * time.Minute
	DefaultCircuitSeries = 100
)

// Webhook delivers notifications by HTTP POST with a JSON body, an
// Idempotency-Key header (the notification id) and the Standard Webhooks
// headers webhook-id (the notification id), webhook-timestamp (Unix seconds
// of the attempt) and webhook-signature (see lib/webhooksig): every
// attempt is signed afresh. A notification whose keys cannot be had
// (KeySource error) is not sent; that is retried like a failed attempt,
// without counting as one or touching the breaker. Timeouts, connection
// errors, 5xx and 429 are retried with exponential backoff and jitter until
// MaxElapsed; other 4xx (and 3xx: redirects are not followed) are final.
// Each endpoint has a circuit breaker: while it is open, no request is
// made and the notification waits within its MaxElapsed budget. It is safe
// for concurrent use.
//
// Requests go through fasthttp's client (HTTP/1.1 with keep-alive, no
// proxy, no redirects followed, TLS certificates verified); a whole call
// costs 0.5-0.6x the CPU of net/http's client (bench/README.md). Every
// connection is dialled through the SSRF guard and its TLS handshake is
// bounded by the attempt's timeout. A request the server did not answer
// because the connection was already closed (a kept-alive connection the
// server had closed: the first read ends at once, or the write fails) is
// sent once more on a new connection within the same attempt (replayable).
// An attempt is never abandoned half-way: when ctx ends during one, its
// request runs to its answer or its deadline, so that no request of a send
// is in flight once Send returned.
type Webhook struct {
	client    *fasthttp.Client
	guard     *netguard.Guard
	breakers  *breakers
	endpoints endpoints
	opt       WebhookOptions
}

// attemptResult is what one HTTP request returned.
type attemptResult struct {
	code       int
	retryAfter time.Duration
}

// excludedError wraps errors that say nothing about the endpoint's health
// (our own cancellation, a refused destination): the breaker ignores them.
type excludedError struct{ err error }

func (e *excludedError) Error() string { return e.err.Error() }
func (e *excludedError) Unwrap() error { return e.err }

// NewWebhook returns a Webhook. It fails on a bad allow list.
func NewWebhook(opt WebhookOptions) (*Webhook, error) {
	guard, err := netguard.NewGuard(opt.Allow)
	if err != nil {
		return nil, err
	}
	client := &fasthttp.Client{
		Name: userAgent,
		// Every connection, TLS or not, is dialled through the guard, which
		// checks the address actually connected to.
		// fasthttp passes 0 (no limit) when it dials for a request that
		// waited for a connection: the attempt's timeout bounds it then.
		DialTimeout: func(addr string, timeout time.Duration) (net.Conn, error) {
			if timeout <= 0 {
				timeout = opt.AttemptTimeout
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			return guard.DialContext(ctx, "tcp", addr)
		},
		// A write timeout makes fasthttp do the TLS handshake at dial time,
		// under a deadline (without one the handshake would wait on the
		// first write, with no bound on reading the server's answer).
		WriteTimeout:    opt.AttemptTimeout,
		MaxConnsPerHost: opt.MaxConnsPerHost,
		// A request waits for a free connection within its attempt's time.
		MaxConnWaitTimeout:  opt.AttemptTimeout,
		MaxIdleConnDuration: idleConnTimeout,
		// The buffer bounds an answer's status line and headers (net/http
		// allows 1 MiB); the body is streamed (see post).
		ReadBufferSize:     maxResponseHeader,
		StreamResponseBody: true,
		// The URL's path is sent as the target configured it.
		DisablePathNormalizing: true,
		// Error texts do not quote what the endpoint answered.
		ConfigureClient: func(hc *fasthttp.HostClient) error {
			hc.SecureErrorLogMessage = true
			return nil
		},
		// One request per attempt, plus at most one replay on a stale
		// connection (replayable).
		MaxIdemponentCallAttempts: 2,
		RetryIfErr: func(_ *fasthttp.Request, _ int, err error) (bool, bool) {
			return false, replayable(err)
		},
	}
	return &Webhook{
		client:   client,
		guard:    guard,
		breakers: newBreakers(opt, func(err error) bool { var e *excludedError; return errors.As(err, &e) }),
		opt:      opt,
	}, nil
}

// Close closes idle connections.
func (w *Webhook) Close() { w.client.CloseIdleConnections() }

func failed(attempts uint32, code int, err string) domain.Outcome {
	return domain.Outcome{Status: notiflowv1.Status_STATUS_FAILED, Attempts: attempts, ProviderCode: int32(code), Err: err, DeadLetter: true}
}

// Send posts the notification to due.WebhookUrl and returns the outcome:
// DELIVERED on a 2xx, FAILED (with DeadLetter set) on a final answer or when
// the retry budget is spent, CANCELLED when the send gate of ctx
// (domain.WithSendGate), checked before every retry, says the target is
// fenced; a gate that cannot judge is a failed attempt (nothing sent). The
// gate is left (domain.LeaveSend) before every wait between attempts. It
// returns an error only when ctx ended first: an attempt under way then
// ends by its own answer or deadline first, and its request may have
// reached the receiver.
func (w *Webhook) Send(ctx context.Context, due *notiflowv1.NotificationDue, body string) (domain.Outcome, error) {
	ep := w.endpoints.get(due.WebhookUrl, w.guard.CheckHost)
	if ep.refused != "" {
		return failed(0, 0, ep.refused), nil
	}
	payload := appendPayload(make([]byte, 0, 192+len(body)), due, body)
	cb, release := w.breakers.get(ep.name)
	defer release()

	deadline := time.Now().Add(w.opt.MaxElapsed)
	var attempts uint32
	lastCode, lastErr := 0, ""
	for try := 1; ; try++ {
		var res attemptResult
		var err error
		if try > 1 {
			// A retry is a new send: the target's fence is checked again
			// first (the claim checked it for the first attempt).
			err = domain.CheckSendGate(ctx)
			if errors.Is(err, domain.ErrFenced) {
				return domain.Outcome{Status: notiflowv1.Status_STATUS_CANCELLED, Attempts: attempts, ProviderCode: int32(lastCode),
					Err: fmt.Sprintf("%s (before retry %d; last error: %s)", domain.ErrFenced, try, orNone(lastErr))}, nil
			}
			if err != nil {
				err = &keyError{fmt.Errorf("fence: %w", err)}
			}
		}
		var keys [][]byte
		if err == nil {
			keys, err = w.keys(ctx, due)
			if err != nil {
				err = &keyError{fmt.Errorf("signing secret: %w", err)}
			}
		}
		if err == nil {
			res, err = cb.Execute(func() (attemptResult, error) {
				attempts++
				return w.attempt(ctx, ep.target, payload, due.NotificationId, keys)
			})
		}
		if ctx.Err() != nil {
			return domain.Outcome{}, fmt.Errorf("webhook %s: %w", due.NotificationId, ctx.Err())
		}
		switch {
		case err == nil && res.code >= 200 && res.code < 300:
			return domain.Outcome{Status: notiflowv1.Status_STATUS_DELIVERED, Attempts: attempts, ProviderCode: int32(res.code)}, nil
		case err == nil:
			return failed(attempts, res.code, fmt.Sprintf("webhook answered HTTP %d (not retried)", res.code)), nil
		case errors.Is(err, netguard.ErrForbiddenAddress):
			return failed(attempts, 0, err.Error()), nil
		case isKeyError(err):
			lastErr = err.Error()
		case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
			// Said once, however many refusals follow the last failure.
			if !strings.HasPrefix(lastErr, circuitOpen) {
				lastErr = circuitOpen + cb.Name() + " (after: " + orNone(lastErr) + ")"
			}
		default:
			if res.code != 0 {
				lastCode = res.code
			}
			lastErr = err.Error()
		}
		wait := consume.Backoff(try, w.opt.BackoffMin, w.opt.BackoffMax)
		if res.retryAfter > wait {
			wait = min(res.retryAfter, w.opt.BackoffMax)
		}
		if time.Now().Add(wait).After(deadline) {
			return failed(attempts, lastCode, fmt.Sprintf("webhook gave up after %d attempt(s) in %s: %s", attempts, w.opt.MaxElapsed, lastErr)), nil
		}
		// No attempt is in progress while we wait: leave the in-flight
		// registration, so that a change of the target is acknowledged
		// without waiting for the backoff; the check before the next
		// attempt enters again atomically with the fence check.
		domain.LeaveSend(ctx)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return domain.Outcome{}, fmt.Errorf("webhook %s: %w", due.NotificationId, ctx.Err())
		case <-t.C:
		}
	}
}

// circuitOpen starts the error of a send its endpoint's breaker refused.
const circuitOpen = "circuit open for "

// keyError: the signing keys could not be had, or the target's fence
// could not be checked; nothing was sent.
type keyError struct{ err error }

func (e *keyError) Error() string { return "not sent: " + e.err.Error() }
func (e *keyError) Unwrap() error { return e.err }

func isKeyError(err error) bool { var e *keyError; return errors.As(err, &e) }

func (w *Webhook) keys(ctx context.Context, due *notiflowv1.NotificationDue) ([][]byte, error) {
	if w.opt.Keys == nil {
		return nil, nil
	}
	return w.opt.Keys.Keys(ctx, due)
}

func orNone(s string) string {
	if s == "" {
		return "no attempt yet"
	}
	return s
}

// userAgent is the User-Agent of every webhook call.
const userAgent = "notiflow-dispatcher"

// idleConnTimeout closes kept-alive connections idle this long, before
// most servers close theirs.
const idleConnTimeout = 30 * time.Second

// maxResponseBody is the most of an answer's body read; the rest is not.
const maxResponseBody = 64 << 10

// maxResponseHeader bounds an answer's status line and headers.
const maxResponseHeader = 64 << 10

// replayable reports whether a request that failed with err got no
// answer because its connection was already closed: the server's close
// ended the first read before any byte of an answer (io.EOF,
// ErrConnectionClosed), or writing the request failed on it (EPIPE). It is
// then sent once more on a new connection, within the same attempt and at
// most once (MaxIdemponentCallAttempts): a kept-alive connection the server
// closed while it sat idle in the pool is the usual case, which net/http
// also replays for a request with an Idempotency-Key. A reset, a timeout, a
// refused dial or a cut answer is not replayed: those are failed attempts.
func replayable(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, syscall.EPIPE)
}

// answer is what one request returned: its status and Retry-After, or the
// error that ended it.
type answer struct {
	code       int
	retryAfter string
	err        error
}

// attempt makes one request. A nil error means a final answer (2xx, or a
// status not worth retrying); an error is a failure for the breaker. It
// returns when the request has ended (see Webhook on ctx).
func (w *Webhook) attempt(ctx context.Context, target string, payload []byte, id string, keys [][]byte) (attemptResult, error) {
	start := time.Now()
	deadline := start.Add(w.opt.AttemptTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	a := w.post(target, payload, id, keys, deadline)
	if err := a.err; err != nil {
		w.observe("error", start)
		var ne net.Error
		switch {
		case errors.Is(err, netguard.ErrForbiddenAddress):
			return attemptResult{}, &excludedError{err}
		case ctx.Err() != nil:
			return attemptResult{}, &excludedError{ctx.Err()}
		case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout), errors.Is(err, fasthttp.ErrNoFreeConns), errors.Is(err, fasthttp.ErrTLSHandshakeTimeout),
			errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
			return attemptResult{}, fmt.Errorf("POST %s: no answer within %s", redactURL(target), w.opt.AttemptTimeout)
		case errors.Is(err, fasthttp.ErrConnectionClosed):
			return attemptResult{}, fmt.Errorf("POST %s: the server closed the connection without an answer", redactURL(target))
		}
		return attemptResult{}, fmt.Errorf("POST %s: %w", redactURL(target), err)
	}
	res := attemptResult{code: a.code}
	w.observe(strconv.Itoa(a.code/100)+"xx", start)
	if a.code == http.StatusTooManyRequests || a.code >= 500 {
		if s, err := strconv.Atoi(a.retryAfter); err == nil && s > 0 {
			res.retryAfter = time.Duration(s) * time.Second
		}
		return res, fmt.Errorf("webhook answered HTTP %d", a.code)
	}
	return res, nil
}

// post sends one signed POST of payload to target, answering by deadline.
// An answer counts from its status line and headers: at most
// maxResponseBody of its body is read, and a body that ends early or late
// does not change it.
func (w *Webhook) post(target string, payload []byte, id string, keys [][]byte, deadline time.Time) answer {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp) // closes the body stream; an unread rest closes the connection
	req.SetRequestURI(target)
	req.Header.SetMethod(http.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("Idempotency-Key", id)
	now := time.Now()
	req.Header.Set(webhooksig.HeaderID, id)
	req.Header.Set(webhooksig.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	if len(keys) > 0 {
		req.Header.Set(webhooksig.HeaderSignature, webhooksig.Sign(keys, id, now, payload))
	}
	req.SetBodyRaw(payload)
	if err := w.client.DoDeadline(req, resp, deadline); err != nil {
		return answer{err: err}
	}
	a := answer{code: resp.StatusCode(), retryAfter: string(resp.Header.Peek("Retry-After"))}
	if body := resp.BodyStream(); body != nil {
		_, _ = io.CopyN(io.Discard, body, maxResponseBody)
	}
	return a
}

func (w *Webhook) observe(outcome string, start time.Time) {
	if w.opt.Latency != nil {
		w.opt.Latency.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
	}
}

// redactURL drops the user info and query of a URL, which may carry
// secrets, for error texts.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable url)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// CircuitState returns the state ("closed", "half-open", "open") of the
// breaker of endpoint (scheme://host:port), or "" when there is none (yet,
// or any more: see breakers).
func (w *Webhook) CircuitState(endpoint string) string {
	w.breakers.mu.Lock()
	e := w.breakers.m[endpoint]
	w.breakers.mu.Unlock()
	if e == nil {
		return ""
	}
	return e.cb.State().String()
}

// Run drops the breakers (and gauge series) of idle endpoints until ctx
// ends; it checks every quarter of CircuitIdle. It returns nil.
func (w *Webhook) Run(ctx context.Context) error {
	t := time.NewTicker(w.breakers.idle / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			w.breakers.sweep(now)
		}
	}
}

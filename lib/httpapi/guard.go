package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
)

// HandlerFunc is a route that returns its error instead of answering it;
// Guard.Handle answers it.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// ErrorMap maps an error a route returned to the status and message the
// client sees; ok is false for an error the routes do not know.
type ErrorMap func(err error) (status int, msg string, ok bool)

// Guard runs routes behind a bearer token and answers their errors as
// {"error": msg}. It is safe for concurrent use.
type Guard struct {
	token  [sha256.Size]byte
	auth   bool
	mapErr ErrorMap
	log    *slog.Logger
	logMsg string
}

// NewGuard returns a guard that requires token (empty disables
// authentication, as NOTIFLOW_INSECURE_NO_AUTH does), maps route errors
// with mapErr and logs the errors nobody knows under logMsg.
func NewGuard(token string, mapErr ErrorMap, log *slog.Logger, logMsg string) *Guard {
	return &Guard{token: sha256.Sum256([]byte(token)), auth: token != "", mapErr: mapErr, log: log, logMsg: logMsg}
}

// Handle checks the bearer token in constant time (both sides are hashed
// first, so not even the token's length leaks): a request without it gets
// 401 with a WWW-Authenticate challenge. Otherwise it runs fn and answers
// fn's error (see Fail).
func (g *Guard) Handle(fn HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.auth {
			given, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			sum := sha256.Sum256([]byte(given))
			if !ok || subtle.ConstantTimeCompare(sum[:], g.token[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="notiflow"`)
				WriteError(w, http.StatusUnauthorized, "missing or invalid bearer token")
				return
			}
		}
		if err := fn(w, r); err != nil {
			g.Fail(w, r, err)
		}
	})
}

// Wrap returns h behind the bearer check of Handle.
func (g *Guard) Wrap(h http.Handler) http.Handler {
	return g.Handle(func(w http.ResponseWriter, r *http.Request) error {
		h.ServeHTTP(w, r)
		return nil
	})
}

// Fail answers err: an *Error with its status and message, then what the
// guard's ErrorMap knows, an *http.MaxBytesError with 413; a request the
// client gave up on gets no answer; anything else is logged and answered
// 500 "internal error".
func (g *Guard) Fail(w http.ResponseWriter, r *http.Request, err error) {
	var (
		he   *Error
		mbe  *http.MaxBytesError
		code = http.StatusInternalServerError
		msg  = "internal error"
	)
	if errors.As(err, &he) {
		WriteError(w, he.Status, he.Msg)
		return
	}
	if c, m, ok := g.mapErr(err); ok {
		WriteError(w, c, m)
		return
	}
	switch {
	case errors.As(err, &mbe):
		code, msg = http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", mbe.Limit)
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		return // the client went away
	default:
		g.log.Error(g.logMsg, "method", r.Method, "path", r.URL.Path, "err", err)
	}
	WriteError(w, code, msg)
}

// HandleNoStore is Handle with every answer, a 401 included, marked
// uncacheable (Cache-Control: no-store): for admin routes, whose answers
// must not outlive the request in a cache.
func (g *Guard) HandleNoStore(fn HandlerFunc) http.Handler {
	h := g.Handle(fn)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

package domain

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ClaimState is what an attempt to claim a notification for sending found.
type ClaimState int

const (
	// Claimed: this worker owns the notification now and must send it,
	// then mark it done or release it.
	Claimed ClaimState = iota + 1
	// Duplicate: the notification was dispatched before; Claim.Previous
	// says how. Nothing is sent again.
	Duplicate
	// RateLimited: the recipient is over its rate limit and the policy is
	// RateDrop; the notification is not sent and is remembered as rate
	// limited.
	RateLimited
	// Busy: another worker holds an in-flight claim (or held one and
	// died); wait until it is done or its claim expires.
	Busy
	// Deferred: the recipient is over its rate limit and the policy is
	// RateDefer; nothing was claimed, counted or remembered. Claim again
	// at Claim.RetryAt, when the recipient's next window opens.
	Deferred
	// Fenced: the target was changed after this occurrence was claimed
	// (its fence is above the record's target version): it must never be
	// sent; it is recorded CANCELLED. Nothing was claimed or counted.
	Fenced
	// Unsynced: the copy of the fences in Redis is incomplete (its marker
	// is missing), so nothing can be judged: wait and claim again, never
	// send. Nothing was claimed or counted.
	Unsynced
)

// FenceRef is what a fence check needs of a record: its target and the
// target version it was claimed under (NotificationDue.target_version).
type FenceRef struct {
	TargetID uint64
	Version  uint64
}

// ErrFenced is returned by a send gate (see WithSendGate) when the
// target's fence now stands above the record: no further attempt may be
// made.
var ErrFenced = errors.New("target fenced: changed, paused or deleted after this occurrence was claimed")

type gateKey struct{}

// SendGate is what a provider that makes more than one attempt consults
// between attempts (see WithSendGate).
type SendGate struct {
	// Check is called before each attempt after the first: nil means go
	// on (the send is registered in flight again, atomically with the
	// check), ErrFenced means stop and record CANCELLED, any other error
	// means the fence could not be checked (do not send now; treat it like
	// a failed attempt).
	Check func(context.Context) error
	// Leave ends the send's registration in flight; it is called before
	// each wait between attempts, so that a change of the target waits
	// for an attempt in progress, never for a backoff. It may be nil.
	Leave func(context.Context)
}

// WithSendGate returns ctx carrying gate.
func WithSendGate(ctx context.Context, gate SendGate) context.Context {
	return context.WithValue(ctx, gateKey{}, gate)
}

// CheckSendGate calls ctx's gate's Check (nil when ctx has none).
func CheckSendGate(ctx context.Context) error {
	if g, ok := ctx.Value(gateKey{}).(SendGate); ok && g.Check != nil {
		return g.Check(ctx)
	}
	return nil
}

// LeaveSend calls ctx's gate's Leave, if any.
func LeaveSend(ctx context.Context) {
	if g, ok := ctx.Value(gateKey{}).(SendGate); ok && g.Leave != nil {
		g.Leave(ctx)
	}
}

// Claim is the answer to a claim attempt.
type Claim struct {
	State ClaimState
	// Previous is the remembered outcome of a Duplicate.
	Previous Outcome
	// Owner is the token of the claim holder when Busy.
	Owner string
	// RetryAt is when a Deferred notification may be claimed again.
	RetryAt time.Time
}

// RatePolicy is what happens to a notification whose recipient is over
// its rate limit.
type RatePolicy string

const (
	// RateDefer holds the notification until the recipient's window
	// allows it, then sends it: nothing is lost, and the recipient's later
	// notifications wait behind it, so their order is kept.
	RateDefer RatePolicy = "defer"
	// RateDrop records the notification RATE_LIMITED and never sends it.
	RateDrop RatePolicy = "drop"
)

// ParseRatePolicy parses "defer" or "drop".
func ParseRatePolicy(s string) (RatePolicy, error) {
	switch p := RatePolicy(s); p {
	case RateDefer, RateDrop:
		return p, nil
	}
	return "", fmt.Errorf("unknown rate-limit policy %q (want %q or %q)", s, RateDefer, RateDrop)
}

// ErrClaimLost is returned when renewing a claim finds it expired or taken
// over by another worker.
var ErrClaimLost = errors.New("in-flight claim lost")

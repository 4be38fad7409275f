package domain

import (
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
)

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

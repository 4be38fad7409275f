package domain

import "errors"

// ClaimState is what an attempt to claim a notification for sending found.
type ClaimState int

const (
	// Claimed: this worker owns the notification now and must send it,
	// then mark it done or release it.
	Claimed ClaimState = iota + 1
	// Duplicate: the notification was dispatched before; Claim.Previous
	// says how. Nothing is sent again.
	Duplicate
	// RateLimited: the recipient is over its rate limit; the notification
	// is not sent and is remembered as rate limited.
	RateLimited
	// Busy: another worker holds an in-flight claim (or held one and
	// died); wait until it is done or its claim expires.
	Busy
)

// Claim is the answer to a claim attempt.
type Claim struct {
	State ClaimState
	// Previous is the remembered outcome of a Duplicate.
	Previous Outcome
	// Owner is the token of the claim holder when Busy.
	Owner string
}

// ErrClaimLost is returned when renewing a claim finds it expired or taken
// over by another worker.
var ErrClaimLost = errors.New("in-flight claim lost")

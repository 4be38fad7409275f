package domain

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

// Outcome is what one dispatch of a notification came to.
type Outcome struct {
	Status notiflowv1.Status
	// Attempts is the number of provider calls made (0 when none was).
	Attempts uint32
	// ProviderCode is the provider's last status code (HTTP status for
	// webhooks), 0 when there was none.
	ProviderCode int32
	// Err says why the dispatch failed; empty on success.
	Err string
	// Body is the rendered notification text.
	Body string
	// OriginalStatus is set on duplicates: the status the first dispatch
	// recorded.
	OriginalStatus notiflowv1.Status
	// DeadLetter asks for the original record to go to the dead-letter
	// topic (with Err as the reason) besides the FAILED result.
	DeadLetter bool
}

// Marker prefixes of the deduplication key's value.
const (
	markerInflight = "inflight:"
	markerDone     = "done:"
)

// InflightMarker is the value of a claimed, not yet finished notification.
func InflightMarker(token string) string { return markerInflight + token }

// DoneMarker is the value remembering a finished dispatch:
// done:<status>:<attempts>:<provider code>.
func DoneMarker(o Outcome) string {
	return markerDone + o.Status.Name() + ":" + strconv.FormatUint(uint64(o.Attempts), 10) + ":" + strconv.FormatInt(int64(o.ProviderCode), 10)
}

// MarkerState is what a deduplication marker says.
type MarkerState int

const (
	// MarkerInflight: some worker claimed the notification and has not
	// finished it.
	MarkerInflight MarkerState = iota + 1
	// MarkerDone: the notification was dispatched; Outcome says how.
	MarkerDone
)

// ErrBadMarker marks a marker value this build cannot read.
var ErrBadMarker = errors.New("unreadable deduplication marker")

// ParseMarker reads a marker value. For an in-flight marker it returns the
// owner's token; for a done marker the remembered outcome (status, attempts,
// provider code).
func ParseMarker(v string) (MarkerState, string, Outcome, error) {
	switch {
	case strings.HasPrefix(v, markerInflight):
		return MarkerInflight, v[len(markerInflight):], Outcome{}, nil
	case strings.HasPrefix(v, markerDone):
		parts := strings.Split(v[len(markerDone):], ":")
		if len(parts) != 3 {
			return 0, "", Outcome{}, fmt.Errorf("%w %q", ErrBadMarker, v)
		}
		st, ok := notiflowv1.StatusByName(parts[0])
		att, err1 := strconv.ParseUint(parts[1], 10, 32)
		code, err2 := strconv.ParseInt(parts[2], 10, 32)
		if !ok || err1 != nil || err2 != nil {
			return 0, "", Outcome{}, fmt.Errorf("%w %q", ErrBadMarker, v)
		}
		return MarkerDone, "", Outcome{Status: st, Attempts: uint32(att), ProviderCode: int32(code)}, nil
	}
	return 0, "", Outcome{}, fmt.Errorf("%w %q", ErrBadMarker, v)
}

// RateLimitedMarker is the done marker a rate-limited notification gets.
var RateLimitedMarker = DoneMarker(Outcome{Status: notiflowv1.Status_STATUS_RATE_LIMITED})

// Package simsend is the format of the simulated provider's record of
// sends, which the dispatcher writes and the scheduler's benchmark reads to
// count duplicates independently of the pipeline: per benchmark run, one
// Redis hash Key(prefix, run id) with one field Field(target id, occurrence
// Unix µs) per occurrence sent, valued with the number of sends.
package simsend

import (
	"fmt"
	"strconv"
	"strings"
)

// Key is the hash of run runID's sends under prefix (the services'
// NOTIFLOW_REDIS_PREFIX).
func Key(prefix, runID string) string { return prefix + "sim:sends:" + runID }

// Field is the hash field of occurrence occurrenceUS (Unix µs) of target
// targetID: "<target id>:<occurrence µs>".
func Field(targetID uint64, occurrenceUS int64) string {
	return strconv.FormatUint(targetID, 10) + ":" + strconv.FormatInt(occurrenceUS, 10)
}

// ParseField returns the target id and occurrence (Unix µs) of a field
// written by Field, or an error naming the field when it has another form.
func ParseField(field string) (targetID uint64, occurrenceUS int64, err error) {
	t, us, ok := strings.Cut(field, ":")
	target, err1 := strconv.ParseUint(t, 10, 64)
	at, err2 := strconv.ParseInt(us, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("simulated send field %q is not <target id>:<occurrence us>", field)
	}
	return target, at, nil
}

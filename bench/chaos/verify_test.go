package chaos

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// outcome is one scenario's verdict, checked from MySQL, the receiver and
// Kafka directly.
type outcome struct {
	Scenario        string   `json:"scenario"`
	Expected        int      `json:"expected"`
	Persisted       int      `json:"persisted"`
	Lost            int      `json:"lost"`
	Duplicates      int      `json:"duplicates"`
	WrongStatus     int      `json:"wrong_status"`
	NotReceived     int      `json:"webhook_not_received"`
	OutOfOrder      int      `json:"out_of_order"`
	RawRepeats      int      `json:"receiver_raw_repeats"`
	DLQ             int      `json:"dlq_records"`
	DLQUnexpected   int      `json:"dlq_unexpected"`
	RecoverySeconds float64  `json:"recovery_seconds"`
	Pass            bool     `json:"pass"`
	Problems        []string `json:"problems,omitempty"`
}

type row struct {
	notificationID string
	recipient      string
	status         string
	sequence       uint64
}

// verify checks the world after a scenario. dlqWant maps the dead letters
// the scenario injected (by key) to a substring their reason must contain.
func (w *world) verify(name string, recovery time.Duration, dlqWant map[string]string) outcome {
	w.t.Helper()
	o := outcome{Scenario: name, Expected: w.n, RecoverySeconds: recovery.Seconds()}
	problem := func(format string, args ...any) {
		if len(o.Problems) < 10 {
			o.Problems = append(o.Problems, fmt.Sprintf(format, args...))
		}
	}

	// MySQL: every expected occurrence exactly once, with its real status.
	rows, err := w.db.Query(`SELECT notification_id, target_id, occurrence_at, recipient_id, status, sequence FROM notifications`)
	if err != nil {
		w.t.Fatalf("read notifications: %v", err)
	}
	byOcc := map[occ][]row{}
	byID := map[string]occ{}
	for rows.Next() {
		var r row
		var target int64
		var at time.Time
		if err := rows.Scan(&r.notificationID, &target, &at, &r.recipient, &r.status, &r.sequence); err != nil {
			w.t.Fatalf("scan notification: %v", err)
		}
		k := occ{target, at.UnixMicro()}
		byOcc[k] = append(byOcc[k], r)
		byID[r.notificationID] = k
	}
	rows.Close()
	for k := range w.expect {
		rs := byOcc[k]
		switch {
		case len(rs) == 0:
			o.Lost++
			problem("occurrence %v not persisted", k)
		case len(rs) > 1:
			o.Duplicates++
			problem("occurrence %v persisted %d times", k, len(rs))
		}
		if len(rs) > 0 {
			o.Persisted++
			if rs[0].status != "delivered" {
				o.WrongStatus++
				problem("occurrence %v has status %s", k, rs[0].status)
			}
		}
	}
	for k := range byOcc {
		if !w.expect[k] {
			problem("unexpected occurrence %v persisted", k)
			o.Duplicates++
		}
	}

	// Receiver: every webhook occurrence received, under one key only, in
	// per-recipient order.
	keysByOcc := map[occ]map[string]bool{}
	seenKey := map[string]bool{}
	lastSeq := map[string]uint64{}
	for _, c := range w.recv.Calls() {
		if c.Status != http.StatusOK {
			continue
		}
		if seenKey[c.IdempotencyKey] {
			o.RawRepeats++
			continue
		}
		seenKey[c.IdempotencyKey] = true
		if k, ok := byID[c.IdempotencyKey]; ok {
			if keysByOcc[k] == nil {
				keysByOcc[k] = map[string]bool{}
			}
			keysByOcc[k][c.IdempotencyKey] = true
		} else {
			problem("receiver got key %s that no row carries", c.IdempotencyKey)
		}
		if last, ok := lastSeq[c.RecipientID]; ok && c.Sequence <= last {
			o.OutOfOrder++
			problem("recipient %s: sequence %d after %d", c.RecipientID, c.Sequence, last)
		}
		lastSeq[c.RecipientID] = max(lastSeq[c.RecipientID], c.Sequence)
	}
	for k := range w.expect {
		if !w.hooks[k.target] {
			continue
		}
		switch n := len(keysByOcc[k]); {
		case n == 0:
			o.NotReceived++
			problem("webhook occurrence %v never received", k)
		case n > 1:
			o.Duplicates++
			problem("webhook occurrence %v received under %d keys", k, n)
		}
	}

	// Kafka: the DLQ holds exactly the injected poison, each with its reason.
	dead := w.dlq()
	o.DLQ = len(dead)
	matched := map[string]bool{}
	for _, m := range dead {
		want, ok := dlqWant[string(m.Key)]
		reason := string(harnessHeader(m.Headers, "dlq-error"))
		if !ok || matched[string(m.Key)] || !contains(reason, want) {
			o.DLQUnexpected++
			problem("unexpected dead letter key=%q reason=%q", m.Key, reason)
			continue
		}
		matched[string(m.Key)] = true
	}
	missing := []string{}
	for k := range dlqWant {
		if !matched[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		o.DLQUnexpected += len(missing)
		problem("injected poison missing from the DLQ: %v", missing)
	}
	o.Pass = o.Lost == 0 && o.Duplicates == 0 && o.OutOfOrder == 0 && o.WrongStatus == 0 && o.NotReceived == 0 && o.DLQUnexpected == 0
	return o
}

func harnessHeader(hs []kafka.Header, key string) []byte {
	for _, h := range hs {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

package service

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

type rowState struct {
	status     string
	attempts   int
	duplicates int
}

func (e *env) row(t *testing.T, id string) rowState {
	t.Helper()
	var s rowState
	if err := e.db.QueryRow(`SELECT status, attempts, duplicates FROM `+e.table+` WHERE notification_id = ?`, id).
		Scan(&s.status, &s.attempts, &s.duplicates); err != nil {
		t.Fatalf("row %s: %v", id, err)
	}
	return s
}

// TestEveryResultTwiceGivesOneRowEach: N results, every one delivered twice,
// plus the ordering cases of the upsert rule, give exactly one row per
// notification with the right outcome.
func TestEveryResultTwiceGivesOneRowEach(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 12)
	const n = 2000
	var evs []*notiflowv1.NotificationDispatched
	for i := range n {
		evs = append(evs, e.result(i))
	}
	// Rule cases on ids 0..2 (same recipient key as the original, so the
	// same partition and the order below is the order of arrival).
	dupAfterDelivered := e.result(0)
	dupAfterDelivered.Status = notiflowv1.Status_STATUS_DUPLICATE
	dupAfterDelivered.OriginalStatus = notiflowv1.Status_STATUS_FAILED
	dupAfterDelivered.DispatchedAtUs += 5000
	olderAttempt := e.result(1)
	olderAttempt.Status = notiflowv1.Status_STATUS_FAILED
	olderAttempt.Attempts = 0
	olderAttempt.DispatchedAtUs -= 2000
	dupOnly := e.result(n) // a notification whose first result was lost
	dupOnly.Status = notiflowv1.Status_STATUS_DUPLICATE
	dupOnly.OriginalStatus = notiflowv1.Status_STATUS_DELIVERED
	evs = append(evs, dupAfterDelivered, olderAttempt, dupOnly)
	e.produce(t, evs...)
	e.produce(t, evs...) // every result again

	cfg := e.config(t)
	start(t, cfg)
	e.waitRows(t, n+1, 60*time.Second)
	e.waitCommitted(t, cfg.Group, 12, int64(2*len(evs)))
	if got := e.rows(t); got != n+1 {
		t.Fatalf("%d rows, want %d", got, n+1)
	}
	if got := e.row(t, dupAfterDelivered.NotificationId); got.status != "delivered" || got.duplicates != 2 {
		t.Errorf("duplicate after delivered: %+v, want delivered with 2 duplicates counted", got)
	}
	if got := e.row(t, olderAttempt.NotificationId); got.status != "delivered" || got.attempts != 1 {
		t.Errorf("older attempt after newer: %+v, want the newer delivered attempt", got)
	}
	if got := e.row(t, dupOnly.NotificationId); got.status != "delivered" || got.duplicates != 2 {
		t.Errorf("duplicate alone: %+v, want its original status delivered", got)
	}
	var wrong int
	if err := e.db.QueryRow(`SELECT COUNT(*) FROM `+e.table+` WHERE status <> 'delivered' OR run_id <> ? OR body = ''`, e.runID).Scan(&wrong); err != nil || wrong != 0 {
		t.Fatalf("%d rows with a wrong status, run or body (%v)", wrong, err)
	}
}

// TestIdleFlush: a partial batch is written about one idle window after the
// last record; a full batch is written without waiting for it.
func TestIdleFlush(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 12)
	cfg := e.config(t)
	cfg.BatchIdle = time.Second
	cfg.BatchMaxAge = 10 * time.Second
	start(t, cfg)
	// Wait until the group joined: one record round trip.
	e.produce(t, e.result(0))
	e.waitRows(t, 1, 30*time.Second)

	var evs []*notiflowv1.NotificationDispatched
	for i := 1; i <= 7; i++ {
		evs = append(evs, e.result(i))
	}
	sent := time.Now()
	e.produce(t, evs...)
	e.waitRows(t, 8, 10*time.Second)
	took := time.Since(sent)
	t.Logf("7 results persisted %s after they were produced (idle %s)", took, cfg.BatchIdle)
	if took < cfg.BatchIdle*8/10 || took > cfg.BatchIdle+1500*time.Millisecond {
		t.Errorf("partial batch persisted after %s, want about one idle window (%s)", took, cfg.BatchIdle)
	}
}

func TestFullBatchDoesNotWaitForIdle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 12)
	cfg := e.config(t)
	cfg.BatchIdle = 5 * time.Second
	cfg.BatchMaxAge = 10 * time.Second
	start(t, cfg)
	e.produce(t, e.result(0))
	e.waitRows(t, 1, 30*time.Second) // joined (after the idle window)

	var evs []*notiflowv1.NotificationDispatched
	for i := 1; i <= cfg.BatchSize; i++ {
		evs = append(evs, e.result(i))
	}
	sent := time.Now()
	e.produce(t, evs...)
	e.waitRows(t, 1+cfg.BatchSize, 10*time.Second)
	took := time.Since(sent)
	t.Logf("%d results persisted %s after they were produced (idle %s)", cfg.BatchSize, took, cfg.BatchIdle)
	if took >= cfg.BatchIdle/2 {
		t.Errorf("a full batch took %s, it must not wait for the idle window (%s)", took, cfg.BatchIdle)
	}
}

// TestPoisonRowGoesToDLQ: a row MySQL refuses (recipient longer than its
// column, in strict mode) is dead lettered with MySQL's reason; the rest of
// its batch is written. An undecodable record is dead lettered too.
func TestPoisonRowGoesToDLQ(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	cfg := e.config(t)
	cfg.BatchIdle = 200 * time.Millisecond
	msgs := e.produceList(t, 50)
	bad := e.result(50)
	bad.RecipientId = strings.Repeat("r", 300)
	badTemplate := e.result(51)
	badTemplate.TemplateId = strings.Repeat("t", 500)
	msgs = append(msgs, e.message(t, bad), e.message(t, badTemplate))
	garbage := e.message(t, e.result(52))
	garbage.Value = []byte{0xff, 0xff, 0xff}
	msgs = append(msgs, garbage)
	e.produceMsgs(t, msgs...)

	r := start(t, cfg)
	e.waitRows(t, 50, 30*time.Second)
	dead := e.deadLetters(t, 3, 30*time.Second)
	reasons := map[string]string{}
	for _, m := range dead {
		reasons[string(m.Key)] = string(kafkax.Header(m.Headers, kafkax.HeaderDLQError))
		if string(kafkax.Header(m.Headers, kafkax.HeaderDLQService)) != "sink" {
			t.Errorf("dead letter without the service header: %v", m.Headers)
		}
	}
	if got := reasons[bad.RecipientId]; !strings.Contains(got, "Data too long") || !strings.Contains(got, "recipient_id") {
		t.Errorf("reason for the long recipient = %q, want MySQL's 'Data too long for column recipient_id'", got)
	}
	if got := reasons[badTemplate.RecipientId]; !strings.Contains(got, "template_id") {
		t.Errorf("reason for the long template = %q", got)
	}
	if got := reasons[string(garbage.Key)]; !strings.Contains(got, "unmarshal") {
		t.Errorf("reason for the undecodable record = %q, want an unmarshal error", got)
	}
	e.waitCommitted(t, cfg.Group, 3, int64(len(msgs)))
	if got := r.metric("notiflow_sink_poison_rows_total"); got != 2 {
		t.Errorf("poison rows metric = %v, want 2", got)
	}
}

// produceList returns the records of results 0..n-1.
func (e *env) produceList(t *testing.T, n int) []kafka.Message {
	t.Helper()
	out := make([]kafka.Message, n)
	for i := range n {
		out[i] = e.message(t, e.result(i))
	}
	return out
}

// TestReadiness: /readyz answers ready while the database works.
func TestReadiness(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	cfg := e.config(t)
	start(t, cfg)
	testkit.Eventually(t, 30*time.Second, func() error {
		resp, err := http.Get("http://" + cfg.HTTPAddr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return testkit.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})
}

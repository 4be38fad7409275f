package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
)

// call sends an API request to the world's first scheduler and returns
// the status, the body and when the answer arrived.
func (w *world) call(method, path string, in any) (int, []byte, time.Time) {
	w.t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			w.t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, w.admin.Base+path, body)
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+w.admin.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Errorf("%s %s: %v", method, path, err)
		return 0, nil, time.Now()
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, b, time.Now()
}

// rows reads the notifications table: per notification id its target and
// status, and how many rows each occurrence has.
func (w *world) rows() (map[string]int64, map[string]string, map[occ]int) {
	w.t.Helper()
	rs, err := w.db.Query(`SELECT notification_id, target_id, occurrence_at, status FROM notifications`)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rs.Close()
	target, status, per := map[string]int64{}, map[string]string{}, map[occ]int{}
	for rs.Next() {
		var (
			id, st string
			tg     int64
			at     time.Time
		)
		if err := rs.Scan(&id, &tg, &at, &st); err != nil {
			w.t.Fatal(err)
		}
		target[id], status[id] = tg, st
		per[occ{tg, at.UnixMicro()}]++
	}
	return target, status, per
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// TestCancelUnderFanOut is the cancel-that-wins test, on the three
// services as real processes: 20,000 one-shot webhook occurrences of
// 20,000 targets (2,000 recipients), due together, sent to a receiver
// that takes 50 ms per call through two dispatchers; once every
// occurrence is claimed and the sends are under way, half of the targets
// are deleted, 16 requests at a time. After each delete's 204 the
// receiver sees no call for that target's occurrence; every occurrence
// ends in exactly one row, delivered or cancelled, cancelled only for
// deleted targets, delivered for a deleted target only when its call
// arrived before the delete was acknowledged.
func TestCancelUnderFanOut(t *testing.T) {
	const (
		n          = 20000
		recipients = 2000
		latency    = 50 * time.Millisecond
	)
	start := time.Now()
	w := newWorldWith(t, "cancel_fanout", layout{schedulers: 1, dispatchers: 2}, worldOpts{
		respond: func(testkit.Call, int) int { time.Sleep(latency); return http.StatusOK }, // the slow provider
		env:     map[string]map[string]string{"dispatcher": {"NOTIFLOW_WORKERS": "64"}},
	})
	// Every target a webhook to the receiver, all due in 3 s.
	due := time.Now().Add(3 * time.Second).Truncate(time.Second).UTC()
	ids := make([]int64, 0, n)
	for lo := 0; lo < n; lo += 5000 {
		var req struct {
			Targets []map[string]any `json:"targets"`
		}
		for i := lo; i < lo+5000; i++ {
			req.Targets = append(req.Targets, map[string]any{"recipient_id": recipientID(i % recipients), "channel": "webhook",
				"webhook_url": w.recv.URL + "/hook", "template_id": "welcome", "params": map[string]string{"name": fmt.Sprint(i)},
				"due_at": due.Format(time.RFC3339)})
		}
		var resp struct {
			IDs []int64 `json:"ids"`
		}
		must(t, w.admin.Do(context.Background(), http.MethodPost, "/v1/targets:bulk", req, &resp))
		ids = append(ids, resp.IDs...)
	}
	w.n = n
	// Mid-flight: every occurrence claimed, a tenth of them sent.
	must(t, w.waitOutbox(1, 2*time.Minute))
	testkit.Eventually(t, 2*time.Minute, func() error {
		if c := len(w.recv.Calls()); c < n/10 {
			return testkit.Errorf("%d calls so far", c)
		}
		return nil
	})
	cancelFrom := time.Now()
	callsAtCancel := len(w.recv.Calls())
	acked := make(map[int64]time.Time, n/2)
	var (
		mu    sync.Mutex
		lat   []time.Duration
		bad   atomic.Int64
		next  atomic.Int64
		group sync.WaitGroup
	)
	for range 16 {
		group.Go(func() {
			for {
				i := int(next.Add(1)-1) * 2
				if i >= n {
					return
				}
				id := ids[i]
				sent := time.Now()
				code, body, at := w.call(http.MethodDelete, fmt.Sprintf("/v1/targets/%d", id), nil)
				if code != http.StatusNoContent {
					bad.Add(1)
					t.Errorf("DELETE target %d: %d %s", id, code, body)
					continue
				}
				mu.Lock()
				acked[id] = at
				lat = append(lat, at.Sub(sent))
				mu.Unlock()
			}
		})
	}
	group.Wait()
	cancelDur := time.Since(cancelFrom)
	w.settle(4*time.Minute, 3*time.Second)

	target, status, per := w.rows()
	late, cancelledOpen, deliveredUnsent, badStatus, multi := 0, 0, 0, 0, 0
	calls := map[string]int{}
	for _, c := range w.recv.Calls() {
		calls[c.NotificationID]++
		tg, ok := target[c.NotificationID]
		if !ok {
			continue
		}
		if ackAt, deleted := acked[tg]; deleted && !c.At.Before(ackAt) {
			late++
			if late <= 5 {
				t.Errorf("target %d: call at %s, after its delete was acknowledged at %s", tg, c.At.Format(time.RFC3339Nano), ackAt.Format(time.RFC3339Nano))
			}
		}
	}
	counts := map[string]int{}
	for id, st := range status {
		counts[st]++
		_, deleted := acked[target[id]]
		switch {
		case st == "cancelled" && !deleted:
			cancelledOpen++
		case st == "cancelled" && calls[id] > 0:
			t.Errorf("notification %s: cancelled, yet the receiver got %d call(s)", id, calls[id])
		case st == "delivered" && calls[id] == 0:
			deliveredUnsent++
		case st != "cancelled" && st != "delivered":
			badStatus++
		}
	}
	for _, k := range per {
		if k != 1 {
			multi++
		}
	}
	if len(per) != n || multi != 0 {
		t.Errorf("%d occurrences have rows (%d with more than one), want %d with exactly one", len(per), multi, n)
	}
	if late != 0 || cancelledOpen != 0 || deliveredUnsent != 0 || badStatus != 0 || bad.Load() != 0 {
		t.Errorf("%d calls after acknowledgement, %d cancelled rows of targets not deleted, %d delivered rows never received, %d rows neither delivered nor cancelled, %d failed deletes",
			late, cancelledOpen, deliveredUnsent, badStatus, bad.Load())
	}
	if counts["cancelled"] == 0 {
		t.Errorf("no occurrence was cancelled: the deletes did not race the fan-out (%d of %d sent before the first)", callsAtCancel, n)
	}
	t.Logf("fan-out %d (%d recipients, provider %s, 2 dispatchers x 64 workers): %d deletes in %s (ack latency p50 %s p99 %s max %s); "+
		"%d calls before the first delete; rows: %v; receiver calls %d; test %s",
		n, recipients, latency, len(acked), cancelDur.Round(time.Millisecond), percentile(lat, .5).Round(time.Millisecond),
		percentile(lat, .99).Round(time.Millisecond), percentile(lat, 1).Round(time.Millisecond), callsAtCancel, counts, len(w.recv.Calls()),
		time.Since(start).Round(time.Second))
}

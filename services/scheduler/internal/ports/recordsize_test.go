package ports_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/services/scheduler/internal/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
	"github.com/notiflow/notiflow/services/scheduler/internal/ports"
)

// TestRefusesATargetWhoseRecordIsTooLarge serves params up to 1 MiB with
// Kafka records limited to 1,000,000 bytes: a target whose params pass the
// params limit but whose notification would not fit a record gets a 400
// naming params and is not stored; one that fits is created.
func TestRefusesATargetWhoseRecordIsTooLarge(t *testing.T) {
	t.Parallel()
	const maxParams, maxRecord = 1 << 20, 1_000_000
	s := serve(t, domain.Limits{MaxParamsBytes: maxParams, MaxRecordBytes: maxRecord, RecordBytes: adapters.DueRecordBytes},
		ports.Options{Token: token, MaxParamsBytes: maxParams, MaxBulkBodyBytes: 4 << 20})
	body := func(paramsBytes int) string {
		blob := strings.Repeat("x", paramsBytes-len(`{"b":""}`))
		due := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		return `{"recipient_id":"r","channel":"sim","template_id":"t","due_at":"` + due + `","params":{"b":"` + blob + `"}}`
	}
	tooLarge := s.call(t, http.MethodPost, "/v1/targets", body(maxRecord-10))
	if tooLarge.code != http.StatusBadRequest || !strings.HasPrefix(tooLarge.errMsg(), "params: ") {
		t.Fatalf("params of %d bytes: %d %.300s; want 400 naming params", maxRecord-10, tooLarge.code, tooLarge.body)
	}
	if n := s.count(t); n != 0 {
		t.Fatalf("%d targets stored, want 0", n)
	}
	if fits := s.call(t, http.MethodPost, "/v1/targets", body(maxRecord-1000)); fits.code != http.StatusCreated {
		t.Fatalf("params of %d bytes: %d %.300s; want 201", maxRecord-1000, fits.code, fits.body)
	}
}

// TestParkedRowsAdminRead reads the parked outbox rows page by page with
// the bearer token, and is refused without it.
func TestParkedRowsAdminRead(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	at := time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)
	var parked []app.Parked
	for _, id := range []uint64{7, 3} {
		parked = append(parked, app.Parked{Note: domain.Notification{Sequence: id, ID: "n-" + strings.Repeat("0", 34),
			TargetID: int64(id) * 10, RecipientID: "r", OccurrenceAt: at}, Reason: "too large", At: at.Add(time.Second)})
	}
	if err := s.store.Park(context.Background(), parked); err != nil {
		t.Fatal(err)
	}
	if r := s.do(t, http.MethodGet, "/admin/outbox/parked", "", "", ""); r.code != http.StatusUnauthorized {
		t.Fatalf("without a token: %d %s; want 401", r.code, r.body)
	}
	type page struct {
		Parked []struct {
			OutboxID uint64 `json:"outbox_id"`
			TargetID int64  `json:"target_id"`
			Reason   string `json:"reason"`
		} `json:"parked"`
		NextAfter *int64 `json:"next_after"`
	}
	var got []uint64
	path := "/admin/outbox/parked?limit=1"
	for i := 0; i < 3; i++ {
		r := s.call(t, http.MethodGet, path, "")
		var p page
		if r.code != http.StatusOK || json.Unmarshal(r.body, &p) != nil || len(p.Parked) != 1 {
			t.Fatalf("GET %s: %d %s", path, r.code, r.body)
		}
		if x := p.Parked[0]; x.TargetID != int64(x.OutboxID)*10 || x.Reason != "too large" {
			t.Fatalf("parked row: %+v", x)
		}
		got = append(got, p.Parked[0].OutboxID)
		if p.NextAfter == nil {
			break
		}
		path = "/admin/outbox/parked?limit=1&after=" + strconv.FormatInt(*p.NextAfter, 10)
	}
	if len(got) != 2 || got[0] != 3 || got[1] != 7 {
		t.Fatalf("pages gave outbox ids %v, want [3 7]", got)
	}
}

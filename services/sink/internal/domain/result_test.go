package domain

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC)

func res(id string, st Status, at time.Duration) *Result {
	return &Result{NotificationID: id, Status: st, DispatchedAt: t0.Add(at), Attempts: uint32(at / time.Second), RecipientID: "r"}
}

func dup(id string, orig Status, at time.Duration) *Result {
	r := res(id, StatusDuplicate, at)
	r.OriginalStatus = orig
	return r
}

func TestMerge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		give       []*Result
		wantStatus Status
		wantAt     time.Duration
		wantDups   int
		wantProv   bool
	}{
		{"single delivered", []*Result{res("a", StatusDelivered, 1*time.Second)}, StatusDelivered, time.Second, 0, false},
		{"newer attempt wins", []*Result{res("a", StatusFailed, time.Second), res("a", StatusDelivered, 2*time.Second)}, StatusDelivered, 2 * time.Second, 0, false},
		{"older attempt never overwrites", []*Result{res("a", StatusDelivered, 2*time.Second), res("a", StatusFailed, time.Second)}, StatusDelivered, 2 * time.Second, 0, false},
		{"equal time rewrites (redelivery)", []*Result{res("a", StatusFailed, time.Second), res("a", StatusDelivered, time.Second)}, StatusDelivered, time.Second, 0, false},
		{"duplicate after delivered only counts", []*Result{res("a", StatusDelivered, time.Second), dup("a", StatusFailed, 5*time.Second)}, StatusDelivered, time.Second, 1, false},
		{"duplicate alone stores original status", []*Result{dup("a", StatusDelivered, 5*time.Second)}, StatusDelivered, 5 * time.Second, 1, true},
		{"duplicate without original status", []*Result{dup("a", "", 5*time.Second)}, StatusUnknown, 5 * time.Second, 1, true},
		{"real result replaces a provisional row whatever its time", []*Result{dup("a", StatusDelivered, 5*time.Second), res("a", StatusFailed, time.Second)}, StatusFailed, time.Second, 1, false},
		{"two duplicates", []*Result{dup("a", StatusDelivered, 5*time.Second), dup("a", StatusDelivered, 6*time.Second)}, StatusDelivered, 5 * time.Second, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rows := Collapse(tt.give)
			if len(rows) != 1 {
				t.Fatalf("got %d rows, want 1", len(rows))
			}
			r := rows[0]
			if r.Status != tt.wantStatus || !r.DispatchedAt.Equal(t0.Add(tt.wantAt)) || r.Duplicates != tt.wantDups || r.Provisional != tt.wantProv {
				t.Errorf("got status=%s at=%s dups=%d provisional=%v, want %s %s %d %v",
					r.Status, r.DispatchedAt.Sub(t0), r.Duplicates, r.Provisional, tt.wantStatus, tt.wantAt, tt.wantDups, tt.wantProv)
			}
			if len(r.Sources) != len(tt.give) {
				t.Errorf("sources %v, want all %d records", r.Sources, len(tt.give))
			}
		})
	}
}

func TestCollapseSortsAndKeepsSources(t *testing.T) {
	t.Parallel()
	rows := Collapse([]*Result{res("c", StatusDelivered, 0), res("a", StatusDelivered, 0), res("c", StatusFailed, time.Second), res("b", StatusDelivered, 0)})
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.NotificationID)
	}
	if got := strings.Join(ids, ","); got != "a,b,c" {
		t.Fatalf("ids %s, want a,b,c", got)
	}
	if got := rows[2].Sources; len(got) != 2 || got[0] != 0 || got[1] != 2 {
		t.Fatalf("sources of c = %v, want [0 2]", got)
	}
	if rows[2].Status != StatusFailed {
		t.Fatalf("status of c = %s, want the newer failed", rows[2].Status)
	}
}

func TestRowOfTruncatesError(t *testing.T) {
	t.Parallel()
	r := res("a", StatusFailed, 0)
	r.Error = strings.Repeat("é", MaxErrorRunes+10)
	got := RowOf(r).Error
	if n := len([]rune(got)); n != MaxErrorRunes {
		t.Fatalf("error kept %d runes, want %d", n, MaxErrorRunes)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give    Result
		wantErr bool
	}{
		{Result{NotificationID: "a", Status: StatusDelivered, OccurrenceAt: t0, DueAt: t0, DispatchedAt: t0}, false},
		{Result{NotificationID: "a", Status: StatusDelivered, OccurrenceAt: time.UnixMicro(0), DueAt: t0, DispatchedAt: t0}, false},
		{Result{NotificationID: "a", Status: StatusDelivered, OccurrenceAt: t0, DueAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), DispatchedAt: t0}, true},
		{Result{NotificationID: "a", Status: StatusDuplicate, OccurrenceAt: t0, DueAt: t0, DispatchedAt: t0}, false},
		{Result{NotificationID: "", Status: StatusDelivered}, true},
		{Result{NotificationID: "a", Status: ""}, true},
		{Result{NotificationID: "a", Status: StatusUnknown}, true},
	}
	for _, tt := range tests {
		if err := tt.give.Validate(); (err != nil) != tt.wantErr {
			t.Errorf("Validate(%+v) = %v, want error %v", tt.give, err, tt.wantErr)
		}
	}
}

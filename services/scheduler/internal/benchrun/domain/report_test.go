package domain

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/webhooksig"
)

var due = time.Date(2026, 3, 9, 9, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return due.Add(time.Duration(ms) * time.Millisecond) }

// row is a row of occurrence (target, 0) persisted latMs after due and
// dispatched 1 ms earlier.
func row(target uint64, latMs int) Row {
	return Row{Occurrence: Occurrence{TargetID: target, OccurrenceUS: due.UnixMicro()}, DueAt: due,
		DispatchedAt: at(latMs - 1), PersistedAt: at(latMs)}
}

func occ(target uint64) Occurrence {
	return Occurrence{TargetID: target, OccurrenceUS: due.UnixMicro()}
}

func TestComputeReport(t *testing.T) {
	t.Parallel()
	// 100 rows persisted 1..100 ms after due: nearest-rank p50 = 50, p95 =
	// 95, p99 = 99.
	hundred := make([]Row, 100)
	for i := range hundred {
		hundred[i] = row(uint64(i+1), i+1)
	}
	tests := []struct {
		name  string
		give  ReportInput
		check func(t *testing.T, r Report)
	}{
		{
			name: "percentiles and rates on known data",
			give: ReportInput{DueAt: due, Eligible: 100, OutboxCreated: 100, LastOutboxAt: at(20), PublishedAt: at(40), Rows: hundred},
			check: func(t *testing.T, r Report) {
				if r.LatencyMs != (Percentiles{P50: 50, P95: 95, P99: 99}) {
					t.Errorf("latency = %+v", r.LatencyMs)
				}
				if r.TotalSec != 0.1 || r.MsgsPerSecond != 1000 || r.EventPublishSec != 0.04 {
					t.Errorf("totalSec %v msgs/s %v publish %v", r.TotalSec, r.MsgsPerSecond, r.EventPublishSec)
				}
				// claim: 100 rows by 20 ms; publish: by 40 ms; dispatch:
				// the last at 99 ms (100/0.099 = 1010.1).
				want := map[string]float64{StageClaim: 5000, StagePublish: 2500, StageDispatch: 1010.1, StagePersist: 1000}
				if !reflect.DeepEqual(r.StagesPerSecond, want) {
					t.Errorf("stages = %v, want %v", r.StagesPerSecond, want)
				}
				if r.Lost != 0 || r.Duplicates != 0 || r.DuplicatesSent != 0 || r.DuplicatesPersisted != 0 {
					t.Errorf("lost %d duplicates %d/%d/%d", r.Lost, r.Duplicates, r.DuplicatesSent, r.DuplicatesPersisted)
				}
				if !reflect.DeepEqual(r.Series.PersistedPerSecond, []int64{100}) {
					t.Errorf("persisted per second = %v", r.Series.PersistedPerSecond)
				}
			},
		},
		{
			name: "missing rows are lost",
			give: ReportInput{DueAt: due, Eligible: 5, OutboxCreated: 5, Rows: []Row{row(1, 10), row(2, 10), row(3, 10)}},
			check: func(t *testing.T, r Report) {
				if r.Lost != 2 || r.Duplicates != 0 {
					t.Errorf("lost %d duplicates %d, want 2, 0", r.Lost, r.Duplicates)
				}
			},
		},
		{
			name: "a hash field of 2 is a duplicate send",
			give: ReportInput{DueAt: due, Eligible: 2, Rows: []Row{row(1, 10), row(2, 10)}, SentMoreThanOnce: []Occurrence{occ(2)}},
			check: func(t *testing.T, r Report) {
				if r.DuplicatesSent != 1 || r.DuplicatesPersisted != 0 || r.Duplicates != 1 || r.Lost != 0 {
					t.Errorf("sent %d persisted %d total %d lost %d", r.DuplicatesSent, r.DuplicatesPersisted, r.Duplicates, r.Lost)
				}
			},
		},
		{
			name: "two rows of one occurrence are a duplicate persisted, and the occurrence is not lost",
			give: ReportInput{DueAt: due, Eligible: 2, Rows: []Row{row(1, 10), row(2, 10), row(2, 30)}},
			check: func(t *testing.T, r Report) {
				if r.DuplicatesPersisted != 1 || r.DuplicatesSent != 0 || r.Duplicates != 1 || r.Lost != 0 {
					t.Errorf("sent %d persisted %d total %d lost %d", r.DuplicatesSent, r.DuplicatesPersisted, r.Duplicates, r.Lost)
				}
				if r.MsgsPerSecond != 66.7 {
					t.Errorf("msgs/s = %v, want distinct rows (2) / 0.03 s", r.MsgsPerSecond)
				}
			},
		},
		{
			name: "an occurrence both sent twice and persisted twice counts once",
			give: ReportInput{DueAt: due, Eligible: 3, Rows: []Row{row(1, 10), row(1, 11), row(2, 10)},
				SentMoreThanOnce: []Occurrence{occ(1), occ(3), occ(3)}},
			check: func(t *testing.T, r Report) {
				if r.DuplicatesSent != 2 || r.DuplicatesPersisted != 1 || r.Duplicates != 2 || r.Lost != 1 {
					t.Errorf("sent %d persisted %d total %d lost %d", r.DuplicatesSent, r.DuplicatesPersisted, r.Duplicates, r.Lost)
				}
			},
		},
		{
			name: "series per second and lag from the due time",
			give: ReportInput{DueAt: due, Eligible: 4, Rows: []Row{row(1, 100), row(2, 900), row(3, 2500), row(4, 2600)},
				Groups: []string{"d", "s"},
				Lag: []LagSample{
					{At: at(-500), Lag: map[string]int64{"d": 999, "s": 0}},
					{At: at(250), Lag: map[string]int64{"d": 3, "s": 1}},
					{At: at(500), Lag: map[string]int64{"d": 1, "s": 2}},
				}},
			check: func(t *testing.T, r Report) {
				if !reflect.DeepEqual(r.Series.PersistedPerSecond, []int64{2, 0, 2}) {
					t.Errorf("persisted per second = %v", r.Series.PersistedPerSecond)
				}
				if !reflect.DeepEqual(r.PeakLag, map[string]int64{"d": 3, "s": 2}) {
					t.Errorf("peak lag = %v (samples before the due time must not count)", r.PeakLag)
				}
				b, _ := json.Marshal(r.Series.Lag)
				if string(b) != `[{"t":0.25,"d":3,"s":1},{"t":0.5,"d":1,"s":2}]` {
					t.Errorf("lag series = %s", b)
				}
			},
		},
		{
			name: "nothing persisted: zeros, no division by zero",
			give: ReportInput{DueAt: due, Eligible: 10, Groups: []string{"d"}},
			check: func(t *testing.T, r Report) {
				if r.Lost != 10 || r.TotalSec != 0 || r.MsgsPerSecond != 0 || r.LatencyMs != (Percentiles{}) {
					t.Errorf("report = %+v", r)
				}
				if _, err := json.Marshal(r); err != nil {
					t.Errorf("marshal: %v", err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.check(t, ComputeReport(tt.give))
		})
	}
}

func TestParamsValidate(t *testing.T) {
	t.Parallel()
	ms := func(n int) *int { return &n }
	secret, err := webhooksig.Generate()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		give Params
		want string // field in error; "" = valid
	}{
		{"valid sim", Params{Notifications: 100, Recipients: 10, Channel: "sim", SimLatencyMs: ms(2)}, ""},
		{"valid inbox with latency ignored", Params{Notifications: 1, Recipients: 1, Channel: "inbox", SimLatencyMs: ms(5)}, ""},
		{"valid at the maximum", Params{Notifications: 1000, Recipients: 1000, Channel: "sim"}, ""},
		{"zero notifications", Params{Recipients: 1, Channel: "sim"}, "notifications"},
		{"over the maximum", Params{Notifications: 1001, Recipients: 1, Channel: "sim"}, "notifications"},
		{"zero recipients", Params{Notifications: 10, Channel: "sim"}, "recipients"},
		{"more recipients than notifications", Params{Notifications: 10, Recipients: 11, Channel: "sim"}, "recipients"},
		{"no channel", Params{Notifications: 10, Recipients: 1}, "channel"},
		{"webhook channel without url", Params{Notifications: 10, Recipients: 1, Channel: "webhook"}, "webhook_url"},
		{"valid webhook", Params{Notifications: 10, Recipients: 1, Channel: "webhook", WebhookURL: "http://127.0.0.1:9/hook"}, ""},
		{"valid webhook with secret", Params{Notifications: 10, Recipients: 1, Channel: "webhook", WebhookURL: "http://127.0.0.1:9/hook", WebhookSecret: secret}, ""},
		{"webhook secret not whsec", Params{Notifications: 10, Recipients: 1, Channel: "webhook", WebhookURL: "http://127.0.0.1:9/hook", WebhookSecret: "hunter2"}, "webhook_secret"},
		{"webhook secret on sim", Params{Notifications: 10, Recipients: 1, Channel: "sim", WebhookSecret: secret}, "webhook_secret"},
		{"unknown channel", Params{Notifications: 10, Recipients: 1, Channel: "sms"}, "channel"},
		{"negative latency", Params{Notifications: 10, Recipients: 1, Channel: "sim", SimLatencyMs: ms(-1)}, "sim_latency_ms"},
		{"latency too high", Params{Notifications: 10, Recipients: 1, Channel: "sim", SimLatencyMs: ms(10001)}, "sim_latency_ms"},
		{"webhook url", Params{Notifications: 10, Recipients: 1, Channel: "sim", WebhookURL: "http://x"}, "webhook_url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.give.Validate(1000)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			ve, ok := err.(*ValidationError)
			if !ok || ve.Field != tt.want {
				t.Fatalf("Validate = %v, want an error on %s", err, tt.want)
			}
		})
	}
}

func TestTargetParams(t *testing.T) {
	t.Parallel()
	two := 2
	if got := string((Params{Channel: "sim", SimLatencyMs: &two}).TargetParams()); got != `{"_sim_latency_ms":2}` {
		t.Errorf("sim params = %s", got)
	}
	if got := string((Params{Channel: "sim"}).TargetParams()); got != `{}` {
		t.Errorf("sim params without latency = %s", got)
	}
	if got := string((Params{Channel: "inbox", SimLatencyMs: &two}).TargetParams()); got != `{}` {
		t.Errorf("inbox params = %s", got)
	}
}

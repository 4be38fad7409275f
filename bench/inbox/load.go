package inbox

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// LoadSpec is one constant-rate attack on one URL.
type LoadSpec struct {
	URL   string
	Token string // sent as Authorization: Bearer
	Rate  int    // requests per second
	For   time.Duration
	// Timeout bounds one request; a slower answer counts as an error.
	Timeout time.Duration
}

// Latencies are in milliseconds.
type Latencies struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// LoadResult summarises an attack.
type LoadResult struct {
	URL       string    `json:"url"`
	Requests  uint64    `json:"requests"`
	TargetRPS int       `json:"targetRate"`
	Rate      float64   `json:"achievedRate"` // requests sent per second
	OKPerSec  float64   `json:"successRate"`  // successful answers per second
	Success   float64   `json:"successRatio"` // share of 2xx answers, 0..1
	LatencyMs Latencies `json:"latencyMs"`
	// Codes counts the answers by HTTP status code ("0" for transport errors).
	Codes map[string]int `json:"statusCodes"`
	// Errors are the distinct errors seen (at most 10).
	Errors []string `json:"errors,omitempty"`
}

// Load sends Requests(spec.Rate, spec.For) GET requests to spec.URL,
// paced at spec.Rate per second; a request that falls behind schedule on
// a busy machine is sent late rather than dropped, so the attack can
// outlast spec.For. It returns the latency distribution of every answer,
// computed by vegeta. Ending ctx stops the attack early; the result then
// covers the requests sent so far and the error is ctx's.
func Load(ctx context.Context, spec LoadSpec) (LoadResult, error) {
	if spec.Rate < 1 || spec.For <= 0 {
		return LoadResult{}, errors.New("load: rate and duration must be positive")
	}
	if spec.Timeout <= 0 {
		spec.Timeout = 5 * time.Second
	}
	hdr := http.Header{}
	if spec.Token != "" {
		hdr.Set("Authorization", "Bearer "+spec.Token)
	}
	target := vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodGet, URL: spec.URL, Header: hdr})
	atk := vegeta.NewAttacker(vegeta.Timeout(spec.Timeout), vegeta.KeepAlive(true))
	var m vegeta.Metrics
	pacer := countPacer{
		ConstantPacer: vegeta.ConstantPacer{Freq: spec.Rate, Per: time.Second},
		total:         Requests(spec.Rate, spec.For),
	}
	results := atk.Attack(target, pacer, 0, "inbox")
	for {
		select {
		case <-ctx.Done():
			atk.Stop()
			for r := range results {
				m.Add(r)
			}
			m.Close()
			return summarise(spec, &m), ctx.Err()
		case r, ok := <-results:
			if !ok {
				m.Close()
				return summarise(spec, &m), nil
			}
			m.Add(r)
		}
	}
}

// Requests is how many requests an attack of rate per second for d sends:
// rate × d rounded up, so at least one for a positive rate and duration
// (integer arithmetic: no product that is whole comes out one short).
func Requests(rate int, d time.Duration) uint64 {
	if rate < 1 || d <= 0 {
		return 0
	}
	r := uint64(rate)
	whole, frac := uint64(d/time.Second), uint64(d%time.Second)
	return whole*r + (frac*r+uint64(time.Second)-1)/uint64(time.Second)
}

// countPacer paces hits as its ConstantPacer does and ends the attack
// after total of them. An attack bounded by a duration instead ends when
// the duration has passed, so a hit the machine sends late near the end
// is never sent and the attack falls short of rate × duration.
type countPacer struct {
	vegeta.ConstantPacer
	total uint64
}

// Pace implements vegeta.Pacer.
func (p countPacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if hits >= p.total {
		return 0, true
	}
	return p.ConstantPacer.Pace(elapsed, hits)
}

func summarise(spec LoadSpec, m *vegeta.Metrics) LoadResult {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	errs := append([]string(nil), m.Errors...)
	sort.Strings(errs)
	if len(errs) > 10 {
		errs = errs[:10]
	}
	return LoadResult{
		URL: spec.URL, Requests: m.Requests, TargetRPS: spec.Rate,
		Rate: m.Rate, OKPerSec: m.Throughput, Success: m.Success,
		LatencyMs: Latencies{
			P50: ms(m.Latencies.P50), P90: ms(m.Latencies.P90), P99: ms(m.Latencies.P99),
			Max: ms(m.Latencies.Max), Mean: ms(m.Latencies.Mean),
		},
		Codes: m.StatusCodes, Errors: errs,
	}
}

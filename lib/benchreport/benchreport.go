package benchreport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
)

// Progress counts a run's notifications at each stage. Dispatched is the
// number of distinct occurrences the simulated provider sent; it stays 0
// for channel inbox, whose provider keeps no count.
type Progress struct {
	TargetsCreated int64 `json:"targetsCreated"`
	OutboxRows     int64 `json:"outboxRows"`
	Published      int64 `json:"published"`
	Dispatched     int64 `json:"dispatched"`
	Persisted      int64 `json:"persisted"`
}

// Report is a finished run's result. Times are seconds from the run's due
// time (the clock starts when the targets fall due; creating them is
// SetupSec, reported apart).
type Report struct {
	// Eligible is the number of notifications the run asked for.
	Eligible int64 `json:"eligible"`
	// OutboxCreated is the number of outbox rows the claims wrote.
	OutboxCreated int64 `json:"outboxCreated"`
	// EventPublishSec is when the last outbox row was acknowledged by
	// Kafka (sampled while the run is watched).
	EventPublishSec float64 `json:"eventPublishSec"`
	// TotalSec is when the last row was persisted.
	TotalSec float64 `json:"totalSec"`
	// MsgsPerSecond is distinct persisted occurrences / TotalSec.
	MsgsPerSecond float64     `json:"msgsPerSecond"`
	LatencyMs     Percentiles `json:"latencyMs"`
	// StagesPerSecond: claim, publish, dispatch and persist throughput.
	StagesPerSecond map[string]float64 `json:"stagesPerSecond"`
	// PeakLag is the largest sampled lag of each consumer group.
	PeakLag map[string]int64 `json:"peakLag"`
	// Lost is Eligible minus the distinct occurrences persisted.
	Lost int64 `json:"lost"`
	// Duplicates counts occurrences sent more than once or persisted in
	// more than one row (each occurrence once).
	Duplicates          int64   `json:"duplicates"`
	DuplicatesSent      int64   `json:"duplicatesSent"`
	DuplicatesPersisted int64   `json:"duplicatesPersisted"`
	Series              *Series `json:"series,omitempty"`
}

// Percentiles of a latency distribution, in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

// Series are the run's time series for the chart.
type Series struct {
	// PersistedPerSecond[i] is the number of rows persisted during second
	// i after the due time.
	PersistedPerSecond []int64 `json:"persistedPerSecond"`
	// Lag is the sampled consumer lag per group.
	Lag []LagPoint `json:"lag"`
}

// LagPoint is the lag of each consumer group T seconds after the due time.
// In JSON it is one object: {"t": 1.25, "<group>": 1200, ...}.
type LagPoint struct {
	T   float64
	Lag map[string]int64
}

// MarshalJSON writes {"t": T, "<group>": lag, ...} with groups in name order.
func (p LagPoint) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"t":`)
	b.WriteString(strconv.FormatFloat(p.T, 'f', -1, 64))
	groups := make([]string, 0, len(p.Lag))
	for g := range p.Lag {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		name, err := json.Marshal(g)
		if err != nil {
			return nil, err
		}
		b.WriteByte(',')
		b.Write(name)
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(p.Lag[g], 10))
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *LagPoint) UnmarshalJSON(data []byte) error {
	var m map[string]json.Number
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	t, ok := m["t"]
	if !ok {
		return errors.New("lag point without t")
	}
	f, err := t.Float64()
	if err != nil {
		return fmt.Errorf("lag point t: %w", err)
	}
	p.T, p.Lag = f, make(map[string]int64, len(m)-1)
	for k, v := range m {
		if k == "t" {
			continue
		}
		n, err := v.Int64()
		if err != nil {
			return fmt.Errorf("lag point %s: %w", k, err)
		}
		p.Lag[k] = n
	}
	return nil
}

package domain

import (
	"math"
	"slices"
	"time"
)

// Occurrence identifies one notification of a target independently of its
// notification id: the target and the occurrence time (Unix microseconds).
type Occurrence struct {
	TargetID     uint64
	OccurrenceUS int64
}

// Row is one row the sink persisted for the run.
type Row struct {
	Occurrence
	DueAt        time.Time
	DispatchedAt time.Time
	PersistedAt  time.Time
}

// LagSample is the consumer lag of each group at one instant.
type LagSample struct {
	At  time.Time
	Lag map[string]int64
}

// ReportInput is what the report is computed from.
type ReportInput struct {
	DueAt    time.Time
	Eligible int64
	// OutboxCreated is the number of the run's outbox rows and
	// LastOutboxAt when the last of them was written (the end of the claim
	// stage).
	OutboxCreated int64
	LastOutboxAt  time.Time
	// PublishedAt is when every outbox row had been acknowledged by Kafka
	// (zero when unknown).
	PublishedAt time.Time
	// Rows are the sink's rows of the run, in any order.
	Rows []Row
	// SentMoreThanOnce are the occurrences the simulated provider sent
	// more than once.
	SentMoreThanOnce []Occurrence
	// Lag are the lag samples, in time order; Groups the groups sampled.
	Lag    []LagSample
	Groups []string
}

// Stage names of Report.StagesPerSecond.
const (
	StageClaim    = "claim"
	StagePublish  = "publish"
	StageDispatch = "dispatch"
	StagePersist  = "persist"
)

// ComputeReport computes the report of a run from what the pipeline
// stored. Latency percentiles are nearest-rank over every row's
// persisted_at - due_at. Rates whose duration is not positive are 0.
func ComputeReport(in ReportInput) Report {
	r := Report{
		Eligible:        in.Eligible,
		OutboxCreated:   in.OutboxCreated,
		StagesPerSecond: map[string]float64{},
		PeakLag:         map[string]int64{},
		Series:          &Series{PersistedPerSecond: []int64{}, Lag: []LagPoint{}},
	}
	since := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return math.Max(0, t.Sub(in.DueAt).Seconds())
	}

	perOcc := make(map[Occurrence]int, len(in.Rows))
	latencies := make([]float64, 0, len(in.Rows))
	var lastPersisted, lastDispatched time.Time
	for _, row := range in.Rows {
		perOcc[row.Occurrence]++
		latencies = append(latencies, float64(row.PersistedAt.Sub(row.DueAt).Microseconds())/1000)
		if row.PersistedAt.After(lastPersisted) {
			lastPersisted = row.PersistedAt
		}
		if row.DispatchedAt.After(lastDispatched) {
			lastDispatched = row.DispatchedAt
		}
	}
	distinct := int64(len(perOcc))
	r.Lost = max(0, in.Eligible-distinct)
	dups := map[Occurrence]bool{}
	for occ, n := range perOcc {
		if n > 1 {
			r.DuplicatesPersisted++
			dups[occ] = true
		}
	}
	seenSent := map[Occurrence]bool{}
	for _, occ := range in.SentMoreThanOnce {
		if seenSent[occ] {
			continue
		}
		seenSent[occ] = true
		r.DuplicatesSent++
		dups[occ] = true
	}
	r.Duplicates = int64(len(dups))

	r.TotalSec = round3(since(lastPersisted))
	r.EventPublishSec = round3(since(in.PublishedAt))
	r.MsgsPerSecond = rate(distinct, r.TotalSec)
	slices.Sort(latencies)
	r.LatencyMs = Percentiles{P50: percentile(latencies, 0.50), P95: percentile(latencies, 0.95), P99: percentile(latencies, 0.99)}
	r.StagesPerSecond[StageClaim] = rate(in.OutboxCreated, since(in.LastOutboxAt))
	r.StagesPerSecond[StagePublish] = rate(in.OutboxCreated, r.EventPublishSec)
	r.StagesPerSecond[StageDispatch] = rate(distinct, since(lastDispatched))
	r.StagesPerSecond[StagePersist] = r.MsgsPerSecond

	if len(in.Rows) > 0 {
		buckets := make([]int64, int(since(lastPersisted))+1)
		for _, row := range in.Rows {
			buckets[int(since(row.PersistedAt))]++
		}
		r.Series.PersistedPerSecond = buckets
	}
	for _, g := range in.Groups {
		r.PeakLag[g] = 0
	}
	for _, s := range in.Lag {
		if s.At.Before(in.DueAt) {
			continue // before the due time: earlier traffic, not this run
		}
		for g, n := range s.Lag {
			r.PeakLag[g] = max(r.PeakLag[g], n)
		}
		r.Series.Lag = append(r.Series.Lag, LagPoint{T: round3(s.At.Sub(in.DueAt).Seconds()), Lag: s.Lag})
	}
	return r
}

// percentile returns the nearest-rank q-quantile of sorted (0 when empty).
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return round3(sorted[min(max(i, 0), len(sorted)-1)])
}

// rate is n/sec rounded to 0.1, or 0 when sec is not positive.
func rate(n int64, sec float64) float64 {
	if sec <= 0 || n <= 0 {
		return 0
	}
	return math.Round(float64(n)/sec*10) / 10
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

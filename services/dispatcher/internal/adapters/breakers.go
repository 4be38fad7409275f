package adapters

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
)

// breakers holds one circuit breaker per webhook endpoint
// (scheme://host:port). It is safe for concurrent use.
type breakers struct {
	failures uint32
	cooldown time.Duration
	state    *prometheus.GaugeVec // nil: not exported
	excluded func(error) bool

	mu sync.Mutex
	m  map[string]*gobreaker.CircuitBreaker[attemptResult]
}

func (b *breakers) get(endpoint string) *gobreaker.CircuitBreaker[attemptResult] {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cb, ok := b.m[endpoint]; ok {
		return cb
	}
	cb := gobreaker.NewCircuitBreaker[attemptResult](gobreaker.Settings{
		Name:        endpoint,
		MaxRequests: 1,
		Timeout:     b.cooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= b.failures },
		IsExcluded:  b.excluded,
		// Called with the breaker's lock held: only set the gauge.
		OnStateChange: func(name string, _, to gobreaker.State) {
			if b.state != nil {
				b.state.WithLabelValues(name).Set(float64(stateValue(to)))
			}
		},
	})
	if b.state != nil {
		b.state.WithLabelValues(endpoint).Set(0)
	}
	b.m[endpoint] = cb
	return cb
}

// stateValue maps a breaker state to the gauge: 0 closed, 1 half-open,
// 2 open.
func stateValue(s gobreaker.State) int {
	switch s {
	case gobreaker.StateHalfOpen:
		return 1
	case gobreaker.StateOpen:
		return 2
	}
	return 0
}

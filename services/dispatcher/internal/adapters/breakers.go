package adapters

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
)

// OtherEndpoint is the CircuitState label shared by the endpoints past
// WebhookOptions.CircuitSeries.
const OtherEndpoint = "other"

// breakers holds one circuit breaker per webhook endpoint
// (scheme://host:port) and exports its state to the CircuitState gauge,
// with a bounded label set:
//
//   - an endpoint with no send in progress and none started for the idle
//     period (CircuitIdle, at least the breaker cooldown, so an open circuit
//     is never forgotten before it would half-open) loses its breaker and
//     its series; its next send starts with a closed circuit;
//   - the first CircuitSeries endpoints that have a breaker get a series
//     labelled with the endpoint; the others share the series labelled
//     "other", which shows the worst state among them (2 when any is open,
//     else 1 when any is half-open, else 0) and disappears with the last
//     of them. A freed slot goes to the next new endpoint.
//
// It is safe for concurrent use.
type breakers struct {
	failures uint32
	cooldown time.Duration
	idle     time.Duration
	series   int
	state    *prometheus.GaugeVec // nil: not exported
	excluded func(error) bool

	mu    sync.Mutex
	m     map[string]*breaker
	own   int    // endpoints with their own series
	other [3]int // endpoints in the "other" series, by state value
}

// breaker is one endpoint's circuit breaker and bookkeeping (under
// breakers.mu).
type breaker struct {
	cb       *gobreaker.CircuitBreaker[attemptResult]
	active   int       // sends in progress
	lastUsed time.Time // when the last send started or ended
	other    bool      // counted in the "other" series
	state    int       // last state value exported
}

func newBreakers(opt WebhookOptions, excluded func(error) bool) *breakers {
	idle, series := opt.CircuitIdle, opt.CircuitSeries
	if idle <= 0 {
		idle = DefaultCircuitIdle
	}
	if series <= 0 {
		series = DefaultCircuitSeries
	}
	return &breakers{
		failures: uint32(max(opt.BreakerFailures, 1)), cooldown: opt.BreakerCooldown,
		idle: max(idle, opt.BreakerCooldown), series: series,
		state: opt.CircuitState, excluded: excluded, m: map[string]*breaker{},
	}
}

// get returns endpoint's breaker, creating it, and counts a send in
// progress until release is called.
func (b *breakers) get(endpoint string) (cb *gobreaker.CircuitBreaker[attemptResult], release func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.m[endpoint]
	if !ok {
		e = &breaker{other: b.own >= b.series}
		e.cb = gobreaker.NewCircuitBreaker[attemptResult](gobreaker.Settings{
			Name:        endpoint,
			MaxRequests: 1,
			Timeout:     b.cooldown,
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= b.failures },
			IsExcluded:  b.excluded,
			// Called with the breaker's lock held; takes b.mu (never the
			// other way round).
			OnStateChange: func(name string, _, to gobreaker.State) {
				b.mu.Lock()
				defer b.mu.Unlock()
				if b.m[name] == e { // not dropped meanwhile
					b.export(name, e, stateValue(to))
				}
			},
		})
		b.m[endpoint] = e
		if e.other {
			b.other[0]++
		} else {
			b.own++
		}
		b.export(endpoint, e, 0)
	}
	e.active++
	e.lastUsed = time.Now()
	return e.cb, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		e.active--
		e.lastUsed = time.Now()
	}
}

// export records e's state v and sets its series (b.mu held).
func (b *breakers) export(endpoint string, e *breaker, v int) {
	if e.other {
		b.other[e.state]--
		b.other[v]++
	}
	e.state = v
	if b.state == nil {
		return
	}
	if !e.other {
		b.state.WithLabelValues(endpoint).Set(float64(v))
		return
	}
	b.setOther()
}

// setOther sets or removes the "other" series (b.mu held).
func (b *breakers) setOther() {
	if b.state == nil {
		return
	}
	switch {
	case b.other[2] > 0:
		b.state.WithLabelValues(OtherEndpoint).Set(2)
	case b.other[1] > 0:
		b.state.WithLabelValues(OtherEndpoint).Set(1)
	case b.other[0] > 0:
		b.state.WithLabelValues(OtherEndpoint).Set(0)
	default:
		b.state.DeleteLabelValues(OtherEndpoint)
	}
}

// sweep drops the breakers idle since before now minus the idle period.
func (b *breakers) sweep(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for endpoint, e := range b.m {
		if e.active > 0 || now.Sub(e.lastUsed) < b.idle {
			continue
		}
		delete(b.m, endpoint)
		if e.other {
			b.other[e.state]--
			b.setOther()
			continue
		}
		b.own--
		if b.state != nil {
			b.state.DeleteLabelValues(endpoint)
		}
	}
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

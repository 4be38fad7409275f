package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/notiflow/notiflow/lib/simsend"
	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/dispatcher/internal/config"
	"github.com/notiflow/notiflow/services/dispatcher/internal/dispatchtest"
)

// metricSum sums every series of the metric family name in s's registry.
func metricSum(t *testing.T, s *Service, name string) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				sum += m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// Redis goes away (connections cut, port closed) while records arrive:
// readiness turns false, records wait (no result, no dead letter, no
// handler retry burnt), and once Redis is back every record is delivered.
func TestRedisOutagePausesAndResumes(t *testing.T) {
	t.Parallel()
	proxy := dispatchtest.NewProxy(t, testkit.RedisAddr(t))
	e := newEnv(t, func(c *config.Config) { c.RedisAddr = proxy.Addr() })
	rdb, _ := testkit.Redis(t)
	s, _ := e.start(t)
	ctx := context.Background()

	mk := func(lo, hi int) []*notiflowv1.NotificationDue {
		var ds []*notiflowv1.NotificationDue
		for i := lo; i < hi; i++ {
			ds = append(ds, dispatchtest.Due(fmt.Sprintf("o-%d", i), fmt.Sprintf("r%d", i%7), uint64(i+1), sim, "bench", "", "outage-run"))
		}
		return ds
	}
	e.produce(t, mk(0, 5)...)
	e.waitResults(t, 5, 60*time.Second)
	testkit.Eventually(t, 10*time.Second, func() error { return s.Ready(ctx) })

	proxy.Down()
	testkit.Eventually(t, 10*time.Second, func() error {
		if err := s.Ready(ctx); err == nil || !contains(err.Error(), "redis") {
			return testkit.Errorf("ready = %v, want a redis failure", err)
		}
		return nil
	})
	e.produce(t, mk(5, 55)...)
	// Records are fetched and wait on Redis.
	testkit.Eventually(t, 30*time.Second, func() error {
		if n := metricSum(t, s, "notiflow_dispatcher_dependency_errors_total"); n < 50 {
			return testkit.Errorf("%v dependency errors so far", n)
		}
		return nil
	})
	if n := e.results.Len(); n != 5 {
		t.Fatalf("%d results during the outage, want still 5", n)
	}

	proxy.Up(t)
	rs := e.waitResults(t, 55, 60*time.Second)
	for _, r := range rs {
		if r.Status != delivered {
			t.Fatalf("%s: %s (%s), want delivered", r.NotificationId, r.Status, r.Error)
		}
	}
	if len(byID(rs)) != 55 || len(rs) != 55 {
		t.Fatalf("%d results for %d ids, want 55 each", len(rs), len(byID(rs)))
	}
	testkit.Eventually(t, 10*time.Second, func() error { return s.Ready(ctx) })
	if n := e.dlq.Len(); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
	for _, name := range []string{"notiflow_consumer_records_retried_total", "notiflow_consumer_records_dead_lettered_total"} {
		if v := metricSum(t, s, name); v != 0 {
			t.Fatalf("%s = %v, want 0", name, v)
		}
	}
	// Every occurrence was sent once.
	sends := rdb.HGetAll(ctx, simsend.Key(e.cfg.RedisPrefix, "outage-run")).Val()
	if len(sends) != 55 {
		t.Fatalf("%d occurrences counted as sent, want 55", len(sends))
	}
	for f, n := range sends {
		if n != "1" {
			t.Fatalf("occurrence %s sent %s times", f, n)
		}
	}
}

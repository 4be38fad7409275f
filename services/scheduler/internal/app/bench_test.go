package app_test

import (
	"context"
	"database/sql"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
)

// BenchmarkClaimPublish100k measures the scheduler's hot path on the real
// services: 100,000 due one-shot targets (10,000 recipients) claimed into
// the outbox and published to a 12-partition topic.
//
//   - staged: one tick claims everything (relay idle), then one relay pass
//     publishes everything; reports each stage's rate, and that of settling
//     the one-shots' stored status afterwards (deferred work, off the
//     claim's path, not part of total_targets/s); and, when the database
//     server runs on this machine, its CPU per target in each stage.
//   - pipelined: the scheduler runs as in production, the relay woken after
//     each claim batch; reports the end-to-end rate (claimed, published and
//     marked).
//
// Run: go test -run '^$' -bench ClaimPublish100k -benchtime 5x ./internal/app/
// NOTIFLOW_BENCH_CLAIM_BATCH and NOTIFLOW_BENCH_RELAY_BATCH override the
// batch sizes (default: the service's defaults).
func BenchmarkClaimPublish100k(b *testing.B) {
	const n = 100_000
	b.Run("staged", func(b *testing.B) {
		e := newEnv(b, 12)
		in := e.instance(b, instanceOpts{claimBatch: benchEnv("CLAIM_BATCH"), relayBatch: benchEnv("RELAY_BATCH")})
		ctx := context.Background()
		db, err := sql.Open("mysql", e.dsn)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		srv := testkit.LocalMySQLServer(ctx, db)
		var claim, publish, settle time.Duration
		var claimCPU, publishCPU, settleCPU time.Duration // the database server's
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			reset(b, in)
			createDue(b, in.store, n, 10_000, time.Now().Add(-time.Minute), "bench")
			b.StartTimer()
			t0, c0 := time.Now(), srv.CPU()
			in.sched.Tick(ctx)
			t1, c1 := time.Now(), srv.CPU()
			got, err := in.sched.Flush(ctx)
			t2, c2 := time.Now(), srv.CPU()
			if err != nil || got != n {
				b.Fatalf("published %d, %v; want %d", got, err, n)
			}
			// The claim's deferred work, which the scheduler does once no
			// tick is claiming: storing the one-shots' status.
			var settled int64
			for more := true; more; {
				var k int64
				if k, more, err = in.store.SettleOneShots(ctx, 10_000); err != nil {
					b.Fatal(err)
				}
				settled += k
			}
			t3, c3 := time.Now(), srv.CPU()
			claimCPU, publishCPU, settleCPU = claimCPU+c1-c0, publishCPU+c2-c1, settleCPU+c3-c2
			if settled != n {
				b.Fatalf("settled %d, want %d", settled, n)
			}
			claim += t1.Sub(t0)
			publish += t2.Sub(t1)
			settle += t3.Sub(t2)
		}
		in.leader.Release(ctx)
		total := float64(n * b.N)
		b.ReportMetric(total/claim.Seconds(), "claim_targets/s")
		b.ReportMetric(total/publish.Seconds(), "publish_targets/s")
		b.ReportMetric(total/(claim+publish).Seconds(), "total_targets/s")
		b.ReportMetric(total/settle.Seconds(), "settle_targets/s")
		if srv.Local() { // the server runs here: its CPU per target by stage
			b.ReportMetric(float64(claimCPU.Microseconds())/total, "claim_db_us/target")
			b.ReportMetric(float64(publishCPU.Microseconds())/total, "publish_db_us/target")
			b.ReportMetric(float64(settleCPU.Microseconds())/total, "settle_db_us/target")
		}
		b.ReportMetric(0, "ns/op")
	})
	b.Run("pipelined", func(b *testing.B) {
		e := newEnv(b, 12)
		in := e.instance(b, instanceOpts{tick: 10 * time.Millisecond, claimBatch: benchEnv("CLAIM_BATCH"), relayBatch: benchEnv("RELAY_BATCH")})
		var claimed, total time.Duration
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			reset(b, in)
			createDue(b, in.store, n, 10_000, time.Now().Add(-time.Minute), "bench")
			baseClaimed, basePublished := value(in.metrics.Claimed), value(in.metrics.Published)
			b.StartTimer()
			t0 := time.Now()
			stop := in.run(b)
			var tClaimed time.Time
			deadline := t0.Add(2 * time.Minute)
			for value(in.metrics.Published)-basePublished < n {
				if tClaimed.IsZero() && value(in.metrics.Claimed)-baseClaimed >= n {
					tClaimed = time.Now()
				}
				if time.Now().After(deadline) {
					b.Fatalf("published %v of %d within 2m", value(in.metrics.Published)-basePublished, n)
				}
				time.Sleep(2 * time.Millisecond) // polling a counter, not waiting for an outcome
			}
			t1 := time.Now()
			if tClaimed.IsZero() {
				tClaimed = t1
			}
			b.StopTimer()
			if err := stop(); err != nil {
				b.Fatal(err)
			}
			claimed += tClaimed.Sub(t0)
			total += t1.Sub(t0)
		}
		all := float64(n * b.N)
		b.ReportMetric(all/claimed.Seconds(), "claim_targets/s")
		b.ReportMetric(all/total.Seconds(), "total_targets/s")
		b.ReportMetric(total.Seconds()/float64(b.N), "s/100k")
		b.ReportMetric(0, "ns/op")
	})
}

// benchEnv reads NOTIFLOW_BENCH_<name> (0 when unset: the default).
func benchEnv(name string) int {
	n, _ := strconv.Atoi(os.Getenv("NOTIFLOW_BENCH_" + name))
	return n
}

func reset(tb testing.TB, in *instance) {
	tb.Helper()
	// Truncating restarts the outbox ids: the relay and settle cursors must restart too.
	for _, q := range []string{`TRUNCATE TABLE outbox`, `TRUNCATE TABLE notification_targets`, `TRUNCATE TABLE target_due`, `UPDATE outbox_relay SET published_id = 0, settled_id = 0`} {
		if _, err := in.store.DB().Exec(q); err != nil {
			tb.Fatalf("%s: %v", q, err)
		}
	}
}

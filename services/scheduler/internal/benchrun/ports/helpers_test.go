package ports_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/netguard"
	"github.com/notiflow/notiflow/lib/obs"
	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	scheduleradapters "github.com/notiflow/notiflow/services/scheduler/internal/adapters"
	schedulerapp "github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/benchtest"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/ports"
	schedulerdomain "github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

const token = "bench-test-token-0123456789"

func testLogger(tb testing.TB) *slog.Logger {
	if os.Getenv("NOTIFLOW_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", tb.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// env is one test's scheduler: its own database (with the sink's table),
// Redis prefix, topics and groups, the benchmark service running, and an
// HTTP server with the admin routes.
type env struct {
	url             string
	db              *scheduleradapters.MySQLStore
	rdb             *redis.Client
	prefix          string
	brokers         []string
	topicDue        string
	topicDispatched string
	dispatcherGroup string
	sinkGroup       string
	svc             *app.Service
	stopSvc         func()
	opts            envOpts
}

// newService returns a benchmark service of the env (a replica named owner,
// or a generated name).
func (e *env) newService(t *testing.T, owner string) *app.Service {
	kc := &kafka.Client{Addr: kafka.TCP(e.brokers...), Timeout: 5 * time.Second}
	o := e.opts
	targets := schedulerapp.NewTargets(e.db, schedulerdomain.Limits{}, 10000, nil)
	guard, err := netguard.NewGuard(o.webhookAllow)
	if err != nil {
		t.Fatal(err)
	}
	targets.UseWebhookGuard(guard, nil)
	return app.NewService(app.Deps{
		Runs:      adapters.NewStore(e.db.DB()),
		Targets:   schedulerapp.NewRuns(targets, e.db),
		Persisted: adapters.NewPersisted(e.db.DB()),
		Sends:     adapters.NewSimSends(e.rdb, e.prefix),
		Lag: adapters.NewLag(kc, adapters.GroupTopic{Group: e.dispatcherGroup, Topic: e.topicDue},
			adapters.GroupTopic{Group: e.sinkGroup, Topic: e.topicDispatched}),
	},
		app.Options{Lead: o.lead, Stall: o.stall, Sample: o.sample, MaxNotifications: o.max, Owner: owner,
			StaleAfter: o.staleAfter, ReapEvery: o.reapEvery}, testLogger(t))
}

type envOpts struct {
	lead, stall, sample   time.Duration
	staleAfter, reapEvery time.Duration
	max                   int
	// webhookAllow is the webhook destination guard's allow list (nil:
	// the default guard, which refuses loopback).
	webhookAllow []string
	sink         ports.SinkAPI // the notifications panel's sink API; zero: not configured
	// routes registers more routes on the env's mux (nil: none).
	routes func(*http.ServeMux)
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	if o.sample == 0 {
		o.sample = 50 * time.Millisecond
	}
	if o.stall == 0 {
		o.stall = 20 * time.Second
	}
	if o.max == 0 {
		o.max = 1000
	}
	ctx := context.Background()
	brokers := testkit.KafkaBrokers(t)
	rdb, prefix := testkit.Redis(t)
	e := &env{
		rdb: rdb, prefix: prefix, brokers: brokers,
		topicDue: testkit.Topic(t, brokers, 3), topicDispatched: testkit.Topic(t, brokers, 3),
		dispatcherGroup: testkit.Group(t) + "_d", sinkGroup: testkit.Group(t) + "_s",
	}
	var err error
	e.db, err = scheduleradapters.OpenMySQL(ctx, testkit.MySQLDSN(t), 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.db.Close() })
	if err := e.db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	benchtest.CreateSinkTable(t, e.db.DB())
	e.opts = o
	e.svc = e.newService(t, "")
	e.stopSvc = e.runService(t, e.svc)
	mux := obs.Mux(obs.NewHealth(nil), obs.NewRegistry())
	ports.NewHandler(e.svc, token, testLogger(t)).WithSinkAPI(o.sink).Register(mux)
	if o.routes != nil {
		o.routes(mux)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

// runService runs svc until the returned stop is called (or the test
// ends); stop fails the test if Run returned an error.
func (e *env) runService(t *testing.T, svc *app.Service) (stop func()) {
	run := testkit.Go(t, svc.Run)
	return func() {
		if err := run.Stop(); err != nil {
			t.Errorf("service Run: %v", err)
		}
	}
}

// startScheduler runs the real scheduler components (lease, claim loop,
// relay to the test's due topic) on the test's database.
func (e *env) startScheduler(t *testing.T) {
	t.Helper()
	log := testLogger(t)
	m := schedulerapp.NewMetrics(prometheus.NewRegistry())
	w := kafkax.NewWriter(e.brokers, kafkax.WriterOptions{})
	t.Cleanup(func() { _ = w.Close() })
	leader := schedulerapp.NewLeader(schedulerapp.RedisMutexes(e.rdb, e.prefix+"scan", 3*time.Second), 3*time.Second, log, m)
	relay := schedulerapp.NewRelay(e.db, scheduleradapters.NewDuePublisher(w, e.topicDue), 5000, time.Now, m, log)
	sched := schedulerapp.NewScheduler(leader, e.db, relay, e.db, schedulerapp.SchedulerOptions{
		Tick: 50 * time.Millisecond, ClaimBatch: 1000, Retention: time.Hour, ShutdownTimeout: 10 * time.Second,
	}, log, m)
	testkit.Go(t, sched.Run)
}

// faults make the simulated pipeline misbehave on purpose, by the position
// of a record in consumption order (0-based).
type faults struct {
	sendTwice map[int]bool // the provider is called twice
	drop      map[int]bool // the result never reaches the sink
}

// simulate plays the dispatcher and the sink faithfully enough for the
// report: a consumer in the dispatcher group reads the due topic, counts a
// simulated send in Redis (as the sim provider does) and produces a
// NotificationDispatched; a consumer in the sink group reads those and
// inserts rows into notifications. Both commit their offsets, so the lag
// the service samples is real.
func (e *env) simulate(t *testing.T, f faults) {
	t.Helper()
	w := kafkax.NewWriter(e.brokers, kafkax.WriterOptions{})
	t.Cleanup(func() { _ = w.Close() })
	reader := func(topic, group string) *kafka.Reader {
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers: e.brokers, Topic: topic, GroupID: group, StartOffset: kafka.FirstOffset,
			MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 50 * time.Millisecond, CommitInterval: 50 * time.Millisecond,
		})
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	dispatcher, sink := reader(e.topicDue, e.dispatcherGroup), reader(e.topicDispatched, e.sinkGroup)
	// Registered last, so it runs first: stop the loops before the readers
	// and the writer close.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	report := func(err error) {
		if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			t.Errorf("simulated pipeline: %v", err)
		}
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			m, err := dispatcher.FetchMessage(ctx)
			if err != nil {
				report(err)
				return
			}
			var due notiflowv1.NotificationDue
			if err := proto.Unmarshal(m.Value, &due); err != nil {
				report(err)
				return
			}
			sends := 1
			if f.sendTwice[i] {
				sends = 2
			}
			for range sends {
				if err := benchtest.RecordSend(ctx, e.rdb, e.prefix, due.RunId, due.TargetId, time.UnixMicro(due.OccurrenceAtUs)); err != nil {
					report(err)
					return
				}
			}
			out := &notiflowv1.NotificationDispatched{
				NotificationId: due.NotificationId, TargetId: due.TargetId, OccurrenceAtUs: due.OccurrenceAtUs,
				RecipientId: due.RecipientId, Sequence: due.Sequence, TemplateId: due.TemplateId, Attempts: 1,
				DueAtUs: due.DueAtUs, DispatchedAtUs: time.Now().UnixMicro(), RunId: due.RunId,
			}
			var msgs []kafka.Message
			if !f.drop[i] {
				v, _ := proto.Marshal(out)
				msgs = append(msgs, kafka.Message{Topic: e.topicDispatched, Key: []byte(due.RecipientId), Value: v})
			}
			if len(msgs) > 0 {
				if err := w.WriteMessages(ctx, msgs...); err != nil {
					report(err)
					return
				}
			}
			if err := dispatcher.CommitMessages(ctx, m); err != nil {
				report(err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			m, err := sink.FetchMessage(ctx)
			if err != nil {
				report(err)
				return
			}
			var d notiflowv1.NotificationDispatched
			if err := proto.Unmarshal(m.Value, &d); err != nil {
				report(err)
				return
			}
			row := benchtest.Row{
				NotificationID: d.NotificationId, TargetID: d.TargetId, OccurrenceAt: time.UnixMicro(d.OccurrenceAtUs).UTC(),
				RecipientID: d.RecipientId, RunID: d.RunId, DueAt: time.UnixMicro(d.DueAtUs).UTC(),
				DispatchedAt: time.UnixMicro(d.DispatchedAtUs).UTC(),
			}
			if err := benchtest.InsertRows(ctx, e.db.DB(), []benchtest.Row{row}); err != nil {
				report(err)
				return
			}
			if err := sink.CommitMessages(ctx, m); err != nil {
				report(err)
				return
			}
		}
	}()
}

type response struct {
	code   int
	header http.Header
	body   []byte
}

func (r response) errMsg() string {
	var e struct{ Error string }
	_ = json.Unmarshal(r.body, &e)
	return e.Error
}

func (e *env) do(t *testing.T, method, path, auth, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{code: resp.StatusCode, header: resp.Header, body: b}
}

const bearer = "Bearer " + token

// start posts a run and returns it, failing the test unless it is 201.
func (e *env) start(t *testing.T, body string) domain.Run {
	t.Helper()
	r := e.do(t, http.MethodPost, "/admin/benchmarks", bearer, body)
	if r.code != http.StatusCreated {
		t.Fatalf("POST /admin/benchmarks: %d %s", r.code, r.body)
	}
	var run domain.Run
	if err := json.Unmarshal(r.body, &run); err != nil {
		t.Fatal(err)
	}
	return run
}

func (e *env) get(t *testing.T, id string) domain.Run {
	t.Helper()
	r := e.do(t, http.MethodGet, "/admin/benchmarks/"+id, bearer, "")
	if r.code != http.StatusOK {
		t.Fatalf("GET run: %d %s", r.code, r.body)
	}
	var run domain.Run
	if err := json.NewDecoder(bytes.NewReader(r.body)).Decode(&run); err != nil {
		t.Fatal(err)
	}
	return run
}

// wait polls run id until it is final.
func (e *env) wait(t *testing.T, id string, timeout time.Duration) domain.Run {
	t.Helper()
	var run domain.Run
	testkit.Eventually(t, timeout, func() error {
		run = e.get(t, id)
		if !run.Status.Final() {
			return testkit.Errorf("run %s is %s, progress %+v", id, run.Status, run.Progress)
		}
		return nil
	})
	return run
}

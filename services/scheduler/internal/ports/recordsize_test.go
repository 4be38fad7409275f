package ports_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/obs"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/scheduler/internal/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
	"github.com/notiflow/notiflow/services/scheduler/internal/ports"
)

// TestRefusesATargetWhoseRecordIsTooLarge serves params up to 1 MiB with
// Kafka records limited to 1,000,000 bytes: a target whose params pass the
// params limit but whose notification would not fit a record gets a 400
// naming params and is not stored; one that fits is created.
func TestRefusesATargetWhoseRecordIsTooLarge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := adapters.OpenMySQL(ctx, testkit.MySQLDSN(t), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const maxParams, maxRecord = 1 << 20, 1_000_000
	limits := domain.Limits{MaxParamsBytes: maxParams}
	mux := obs.Mux(obs.NewHealth(), obs.NewRegistry())
	ports.NewAPI(app.NewTargets(store, limits, 5, nil), ports.Options{Token: token, MaxParamsBytes: maxParams, MaxBulkBodyBytes: 4 << 20},
		slog.New(slog.NewTextHandler(io.Discard, nil))).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s := &server{url: srv.URL, store: store}

	body := func(paramsBytes int) string {
		blob := strings.Repeat("x", paramsBytes-len(`{"b":""}`))
		due := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		return `{"recipient_id":"r","channel":"sim","template_id":"t","due_at":"` + due + `","params":{"b":"` + blob + `"}}`
	}
	tooLarge := s.call(t, http.MethodPost, "/v1/targets", body(maxRecord-10))
	if tooLarge.code != http.StatusBadRequest || !strings.HasPrefix(tooLarge.errMsg(), "params: ") {
		t.Fatalf("params of %d bytes: %d %s; want 400 naming params", maxRecord-10, tooLarge.code, tooLarge.body)
	}
	if n := s.count(t); n != 0 {
		t.Fatalf("%d targets stored, want 0", n)
	}
	if fits := s.call(t, http.MethodPost, "/v1/targets", body(maxRecord-1000)); fits.code != http.StatusCreated {
		t.Fatalf("params of %d bytes: %d %s; want 201", maxRecord-1000, fits.code, fits.body)
	}
}

package ports_test

import (
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/ports"
	schedulerports "github.com/notiflow/notiflow/services/scheduler/internal/ports"
)

func TestRenderChart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		give      *domain.Series
		wantBars  int
		wantLines int
	}{
		{name: "no report", give: nil},
		{name: "empty series", give: &domain.Series{}},
		{name: "one second, one sample", give: &domain.Series{PersistedPerSecond: []int64{5},
			Lag: []domain.LagPoint{{T: 0.25, Lag: map[string]int64{"d": 3}}}}, wantBars: 1, wantLines: 1},
		{name: "group names are escaped", give: &domain.Series{PersistedPerSecond: []int64{1, 2, 3},
			Lag: []domain.LagPoint{{T: 1, Lag: map[string]int64{`<g&"x">`: 1, "s": 0}}, {T: 2, Lag: map[string]int64{`<g&"x">`: 0, "s": 0}}}},
			wantBars: 3, wantLines: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			run := domain.Run{ID: "66666666-6666-4666-8666-666666666666"}
			if tt.give != nil {
				run.Report = &domain.Report{Series: tt.give}
			}
			svg := ports.RenderChart(run)
			// Well-formed XML, no NaN or Inf coordinates.
			dec := xml.NewDecoder(strings.NewReader(svg))
			for {
				if _, err := dec.Token(); err != nil {
					if !errors.Is(err, io.EOF) {
						t.Fatalf("not well-formed: %v\n%s", err, svg)
					}
					break
				}
			}
			if strings.Contains(svg, "NaN") || strings.Contains(svg, "Inf") {
				t.Fatalf("NaN/Inf in %s", svg)
			}
			if n := strings.Count(svg, `class="persisted-bar"`); n != tt.wantBars {
				t.Errorf("%d bars, want %d", n, tt.wantBars)
			}
			if n := strings.Count(svg, `class="lag-line"`); n != tt.wantLines {
				t.Errorf("%d lag lines, want %d", n, tt.wantLines)
			}
		})
	}
}

func TestOpenAPIDocumentsTheAdminRoutes(t *testing.T) {
	t.Parallel()
	doc := string(schedulerports.OpenAPI())
	for _, p := range []string{"/admin/benchmarks:", "/admin/benchmarks/{id}:", "/admin/benchmarks/{id}/chart.svg:", "/admin/:",
		"BenchmarkRequest:", "BenchmarkRun:", "BenchmarkProgress:", "BenchmarkReport:"} {
		if !strings.Contains(doc, "  "+p) {
			t.Errorf("openapi.yaml does not document %s", p)
		}
	}
}

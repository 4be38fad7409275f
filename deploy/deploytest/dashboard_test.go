package deploytest

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// definedMetric is a Prometheus metric the Go code registers.
type definedMetric struct {
	histogram bool
}

// definedMetrics scans the non-test Go code of lib/ and services/ for
// prometheus.*Opts literals and returns the full metric names
// (Namespace_Subsystem_Name, resolving string constants). When Name is not
// a constant (a helper that takes it as a parameter, as lib/consume does),
// the prefix is combined with every string literal of the file.
func definedMetrics(tb testing.TB) map[string]definedMetric {
	tb.Helper()
	root := repoRoot(tb)
	out := map[string]definedMetric{}
	for _, dir := range []string{"lib", "services"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			consts := map[string]string{}
			var literals []string
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.ValueSpec:
					for i, name := range n.Names {
						if i < len(n.Values) {
							if s, ok := stringLit(n.Values[i]); ok {
								consts[name.Name] = s
							}
						}
					}
				case *ast.BasicLit:
					if s, ok := stringLit(n); ok {
						literals = append(literals, s)
					}
				}
				return true
			})
			ast.Inspect(f, func(n ast.Node) bool {
				cl, ok := n.(*ast.CompositeLit)
				if !ok {
					return true
				}
				sel, ok := cl.Type.(*ast.SelectorExpr)
				if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "prometheus" {
					return true
				}
				fields := map[string]string{}
				resolved := map[string]bool{}
				for _, elt := range cl.Elts {
					kv, ok := elt.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					key, _ := kv.Key.(*ast.Ident)
					if key == nil {
						continue
					}
					if s, ok := stringLit(kv.Value); ok {
						fields[key.Name], resolved[key.Name] = s, true
					} else if id, ok := kv.Value.(*ast.Ident); ok {
						if s, ok := consts[id.Name]; ok {
							fields[key.Name], resolved[key.Name] = s, true
						}
					}
				}
				hist := strings.HasPrefix(sel.Sel.Name, "Histogram") || strings.HasPrefix(sel.Sel.Name, "Summary")
				var prefix string
				for _, part := range []string{fields["Namespace"], fields["Subsystem"]} {
					if part != "" {
						prefix += part + "_"
					}
				}
				if resolved["Name"] {
					out[prefix+fields["Name"]] = definedMetric{histogram: hist}
				} else {
					for _, l := range literals {
						out[prefix+l] = definedMetric{histogram: hist}
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			tb.Fatalf("scan %s for metrics: %v", dir, err)
		}
	}
	return out
}

func stringLit(e ast.Expr) (string, bool) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}

// dashboard is the part of Grafana's dashboard model the checks read.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []dashPanel `json:"panels"`
}

type dashPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

var metricRef = regexp.MustCompile(`\b(?:scheduler|notiflow)_[a-z0-9_]+\b`)

func TestGrafanaDashboard(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "dashboards", "notiflow.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("notiflow.json: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard needs a uid and a title")
	}
	hasDS := slices.ContainsFunc(d.Templating.List, func(v struct {
		Name  string `json:"name"`
		Type  string `json:"type"`
		Query string `json:"query"`
	}) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	})
	if !hasDS {
		t.Errorf("dashboard: want a datasource variable (type datasource, query prometheus) so it works with any Grafana")
	}
	defined := definedMetrics(t)
	used := map[string]bool{}
	ids := map[int]bool{}
	type cell struct{ x, y int }
	occupied := map[cell]int{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, ok := occupied[cell{x, y}]; ok {
					t.Errorf("panels %d and %d overlap", other, p.ID)
				}
				occupied[cell{x, y}] = p.ID
			}
		}
		if p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q is wider than the grid", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource must be ${datasource}", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		for _, tg := range p.Targets {
			refs := metricRef.FindAllString(tg.Expr, -1)
			if len(refs) == 0 {
				t.Errorf("panel %q: query %q names no notiflow metric", p.Title, tg.Expr)
			}
			for _, m := range refs {
				base := m
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(m, suf); ok && defined[b].histogram {
						base = b
					}
				}
				if _, ok := defined[base]; !ok {
					t.Errorf("panel %q: metric %s is registered nowhere in lib/ or services/", p.Title, m)
				}
				used[base] = true
			}
		}
	}
	// What the dashboard must show (issue 8): throughput per stage, lag per
	// group, DLQ rate, batch sizes, flush latency, webhook latency and
	// circuit state.
	for _, m := range []string{
		"notiflow_scheduler_published_total", "notiflow_consumer_records_processed_total", "notiflow_dispatcher_results_total", "notiflow_sink_results_total",
		"notiflow_consumer_lag", "notiflow_consumer_records_dead_lettered_total", "notiflow_consumer_batch_size",
		"notiflow_sink_flush_seconds", "notiflow_dispatcher_webhook_request_seconds", "notiflow_dispatcher_webhook_circuit_state",
	} {
		if _, ok := defined[m]; !ok {
			t.Errorf("metric %s is no longer registered by the code: update the dashboard and this test", m)
		}
		if !used[m] {
			t.Errorf("the dashboard does not show %s", m)
		}
	}
}

package service

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"

	"github.com/notiflow/notiflow/services/scheduler/internal/ports"
)

// openAPIDoc is the part of the OpenAPI document the route test reads.
type openAPIDoc struct {
	Paths map[string]map[string]any `yaml:"paths"`
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options"}

// docOperation is one documented operation of a path the scheduler serves.
type docOperation struct {
	public    bool     // security: [] (no bearer token)
	body      bool     // has a requestBody
	responses []string // status codes
}

// schedulerOperations returns the document's operations ("METHOD /path")
// on paths the scheduler serves: those without servers of their own (the
// sink's read API is documented here too, with the sink's server).
func schedulerOperations(t *testing.T) map[string]docOperation {
	t.Helper()
	var doc openAPIDoc
	if err := yaml.Unmarshal(ports.OpenAPI(), &doc); err != nil {
		t.Fatalf("parse openapi.yaml: %v", err)
	}
	ops := map[string]docOperation{}
	for path, item := range doc.Paths {
		if _, ok := item["servers"]; ok {
			continue
		}
		for _, m := range httpMethods {
			op, ok := item[m].(map[any]any)
			if !ok {
				continue
			}
			var o docOperation
			if sec, ok := op["security"].([]any); ok && len(sec) == 0 {
				o.public = true
			}
			_, o.body = op["requestBody"]
			resp, _ := op["responses"].(map[any]any)
			for code := range resp {
				o.responses = append(o.responses, strings.TrimSpace(toString(code)))
			}
			ops[strings.ToUpper(m)+" "+path] = o
		}
	}
	return ops
}

func toString(v any) string { return fmt.Sprint(v) }

// TestOpenAPIDescribesEveryRoute: every route registered on the
// scheduler's mux is in openapi.yaml and every scheduler route there is
// registered (the patterns compared as "METHOD /path"; "/{$}" is the
// document's trailing "/"). Every operation behind the token documents
// 401, and every operation with a request body documents 400, 413 and 415,
// the answers lib/httpapi gives to a missing token and to a bad, too large
// or non-JSON body.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	t.Parallel()
	s, err := New(t.Context(), testConfig(t), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.close)
	registered := map[string]bool{}
	for _, p := range s.Routes() {
		registered[strings.Replace(p, "/{$}", "/", 1)] = true
	}
	if len(registered) < 10 {
		t.Fatalf("only %d routes recorded: %v", len(registered), s.Routes())
	}
	ops := schedulerOperations(t)
	for r := range registered {
		if _, ok := ops[r]; !ok {
			t.Errorf("route %s is registered but not in openapi.yaml", r)
		}
	}
	for r, o := range ops {
		if !registered[r] {
			t.Errorf("openapi.yaml documents %s, which the scheduler does not serve", r)
		}
		if !o.public && !slices.Contains(o.responses, "401") {
			t.Errorf("%s needs the token but does not document 401", r)
		}
		if o.body {
			for _, code := range []string{"400", "413", "415"} {
				if !slices.Contains(o.responses, code) {
					t.Errorf("%s takes a JSON body but does not document %s", r, code)
				}
			}
		}
	}
}

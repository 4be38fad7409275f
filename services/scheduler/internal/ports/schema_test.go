package ports_test

import (
	"encoding/json"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"

	"github.com/notiflow/notiflow/services/scheduler/internal/ports"
)

// TestTargetSchemaAgreesWithTheServer: recipient_id and template_id, which
// the server refuses empty, have minLength 1 in the document's
// TargetInput, and every string field the document gives minLength 1 is
// refused empty or blank by the server (400 naming the field).
func TestTargetSchemaAgreesWithTheServer(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Type      string `yaml:"type"`
					MinLength *int   `yaml:"minLength"`
				} `yaml:"properties"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(ports.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	props := doc.Components.Schemas["TargetInput"].Properties
	for _, f := range []string{"recipient_id", "template_id"} {
		if p := props[f]; p.MinLength == nil || *p.MinLength != 1 {
			t.Errorf("TargetInput.%s: minLength %v, want 1 (the server refuses it empty)", f, p.MinLength)
		}
	}
	s := newServer(t)
	valid := map[string]any{"recipient_id": "u1", "channel": "inbox", "template_id": "t1", "cron": "@daily"}
	for field, p := range props {
		if p.Type != "string" || p.MinLength == nil || *p.MinLength < 1 {
			continue
		}
		for _, blank := range []string{"", "  "} {
			body := map[string]any{}
			for k, v := range valid {
				body[k] = v
			}
			body[field] = blank
			b, _ := json.Marshal(body)
			r := s.call(t, "POST", "/v1/targets", string(b))
			if r.code != 400 || !strings.HasPrefix(r.errMsg(), field+": ") {
				t.Errorf("%s = %q: %d %s, want 400 naming %s", field, blank, r.code, r.body, field)
			}
		}
	}
}

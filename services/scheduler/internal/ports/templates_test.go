package ports_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/notiflow/notiflow/lib/templates"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
	"github.com/notiflow/notiflow/services/scheduler/internal/ports"
)

func newTemplateServer(t *testing.T) *server {
	t.Helper()
	return serveFull(t, domain.Limits{MaxParamsBytes: 1024},
		ports.Options{Token: token, MaxParamsBytes: 1024, MaxBulkBodyBytes: 1 << 16}, nil, true)
}

type templateView struct {
	Name    string   `json:"name"`
	Channel string   `json:"channel"`
	Subject string   `json:"subject"`
	Body    string   `json:"body"`
	Params  []string `json:"params"`
	Version int64    `json:"version"`
}

func decodeTemplate(t *testing.T, r response) templateView {
	t.Helper()
	var v templateView
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return v
}

// TestTemplatesCRUD: create, read, list, update (version up), delete, and
// each route's 4xx naming the field; the Redis copy the dispatchers read
// follows every change.
func TestTemplatesCRUD(t *testing.T) {
	t.Parallel()
	s := newTemplateServer(t)
	ctx := context.Background()
	r := s.call(t, "POST", "/v1/templates", `{"name":"order","channel":"inbox","subject":"Order {{.id}}","body":"Hi {{.name}}","params":["name","id"]}`)
	if r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	if v := decodeTemplate(t, r); v.Version != 1 || strings.Join(v.Params, ",") != "id,name" || v.Channel != "inbox" {
		t.Fatalf("created %+v", v)
	}
	if got, ok, err := templates.Load(ctx, s.rdb, s.prefix, "order"); err != nil || !ok || got.Version != 1 {
		t.Fatalf("redis copy after create: %+v %v %v", got, ok, err)
	}
	if r := s.call(t, "GET", "/v1/templates/order", ""); r.code != 200 || decodeTemplate(t, r).Body != "Hi {{.name}}" {
		t.Fatalf("get: %d %s", r.code, r.body)
	}
	r = s.call(t, "PUT", "/v1/templates/order", `{"channel":"inbox","body":"Hello {{.name}}","params":["name"]}`)
	if r.code != 200 || decodeTemplate(t, r).Version != 2 {
		t.Fatalf("update: %d %s", r.code, r.body)
	}
	if got, _, _ := templates.Load(ctx, s.rdb, s.prefix, "order"); got.Version != 2 || got.Body != "Hello {{.name}}" {
		t.Fatalf("redis copy after update: %+v", got)
	}
	r = s.call(t, "GET", "/v1/templates", "")
	var list struct{ Templates []templateView }
	if err := json.Unmarshal(r.body, &list); r.code != 200 || err != nil || len(list.Templates) != 1 || list.Templates[0].Version != 2 {
		t.Fatalf("list: %d %s", r.code, r.body)
	}

	bad := []struct {
		name, method, path, body string
		wantCode                 int
		wantMsg                  string
	}{
		{"exists", "POST", "/v1/templates", `{"name":"order","body":"x"}`, 409, `name: template "order" exists`},
		{"built-in name", "POST", "/v1/templates", `{"name":"welcome","body":"x"}`, 409, `name: "welcome" is a built-in or file template`},
		{"no name", "POST", "/v1/templates", `{"body":"x"}`, 400, "name: is required"},
		{"body does not parse", "POST", "/v1/templates", `{"name":"x","body":"{{.a","params":["a"]}`, 400, "body: does not parse as a Go text/template"},
		{"undeclared param", "POST", "/v1/templates", `{"name":"x","body":"{{.a}}"}`, 400, "params: body refers to {{.a}}, which is not declared"},
		{"unused param", "POST", "/v1/templates", `{"name":"x","body":"a","params":["a"]}`, 400, "params: declared but not used by subject or body: a"},
		{"bad channel", "POST", "/v1/templates", `{"name":"x","channel":"sms","body":"a"}`, 400, "channel: unknown channel"},
		{"unknown field", "POST", "/v1/templates", `{"name":"x","body":"a","version":3}`, 400, "version"},
		{"rename", "PUT", "/v1/templates/order", `{"name":"other","body":"a"}`, 400, `name: "other" does not match the path's "order"`},
		{"update missing", "PUT", "/v1/templates/nope", `{"body":"a"}`, 404, "template not found"},
		{"get missing", "GET", "/v1/templates/nope", "", 404, "template not found"},
		{"delete missing", "DELETE", "/v1/templates/nope", "", 404, "template not found"},
	}
	for _, tt := range bad {
		r := s.call(t, tt.method, tt.path, tt.body)
		if r.code != tt.wantCode || !strings.Contains(r.errMsg(), tt.wantMsg) {
			t.Errorf("%s: %d %s, want %d ...%s...", tt.name, r.code, r.body, tt.wantCode, tt.wantMsg)
		}
	}
	if r := s.do(t, "GET", "/v1/templates", "", "", ""); r.code != 401 {
		t.Errorf("list without the token: %d, want 401", r.code)
	}

	if r := s.call(t, "DELETE", "/v1/templates/order", ""); r.code != 204 {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}
	if got, ok, err := templates.Load(ctx, s.rdb, s.prefix, "order"); ok || err != nil {
		t.Fatalf("redis copy after delete: %+v %v %v, want absent", got, ok, err)
	}
	if r := s.call(t, "GET", "/v1/templates/order", ""); r.code != 404 {
		t.Fatalf("get after delete: %d", r.code)
	}
	// The name is free again; versions go on from the tombstone's.
	r = s.call(t, "POST", "/v1/templates", `{"name":"order","body":"again"}`)
	if r.code != 201 || decodeTemplate(t, r).Version != 4 {
		t.Fatalf("re-create: %d %s, want version 4", r.code, r.body)
	}
}

// TestTargetsCheckTheirTemplate: creating a target (single and bulk)
// checks that its template exists, is for its channel, and that params
// carry every declared parameter (400 listing the missing names); a
// template used by live targets cannot be deleted (409 saying how many).
func TestTargetsCheckTheirTemplate(t *testing.T) {
	t.Parallel()
	s := newTemplateServer(t)
	if r := s.call(t, "POST", "/v1/templates", `{"name":"ship","channel":"inbox","subject":"{{.order}}","body":"{{.name}}: {{.carrier}}","params":["name","order","carrier"]}`); r.code != 201 {
		t.Fatalf("create template: %d %s", r.code, r.body)
	}
	target := func(tpl, channel, params string) string {
		return `{"recipient_id":"u1","channel":"` + channel + `","template_id":"` + tpl + `","params":` + params + `,"cron":"@daily"}`
	}
	tests := []struct {
		name, body string
		wantCode   int
		wantMsg    string
	}{
		{"unknown template", target("nope", "inbox", `{}`), 400, `template_id: unknown template "nope"`},
		{"params missing", target("ship", "inbox", `{"name":"Ann"}`), 400, `params: missing carrier, order, declared by template "ship"`},
		{"no params", target("ship", "inbox", `null`), 400, `params: missing carrier, name, order`},
		{"wrong channel", target("ship", "sim", `{"name":"a","order":1,"carrier":"c"}`), 400, `channel: template "ship" is for channel inbox only`},
		{"built-in params missing", target("welcome", "inbox", `{}`), 400, `params: missing name, declared by template "welcome"`},
		{"managed ok", target("ship", "inbox", `{"name":"a","order":1,"carrier":"c","extra":true}`), 201, ""},
		{"built-in ok", target("reminder", "sim", `{"name":"a","what":"b"}`), 201, ""},
	}
	for _, tt := range tests {
		r := s.call(t, "POST", "/v1/targets", tt.body)
		if r.code != tt.wantCode || !strings.Contains(r.errMsg(), tt.wantMsg) {
			t.Errorf("%s: %d %s, want %d ...%s...", tt.name, r.code, r.body, tt.wantCode, tt.wantMsg)
		}
	}
	r := s.call(t, "POST", "/v1/targets:bulk", `{"targets":[`+target("ship", "inbox", `{"name":"a","order":1,"carrier":"c"}`)+`,`+target("ship", "inbox", `{"order":1}`)+`]}`)
	if r.code != 400 || r.errMsg() != `targets[1].params: missing carrier, name, declared by template "ship"` {
		t.Errorf("bulk: %d %s", r.code, r.body)
	}
	if n := s.count(t); n != 2 {
		t.Errorf("%d targets stored, want the 2 valid single creates", n)
	}

	// An update that declares a new parameter applies to targets created
	// after it. The live target of "ship" is given it first: an update
	// that live targets lack a parameter of is refused (see
	// TestTemplateUpdateChecksLiveTargets).
	var live struct {
		Targets []struct {
			ID         int64  `json:"id"`
			TemplateID string `json:"template_id"`
		}
	}
	if err := json.Unmarshal(s.call(t, "GET", "/v1/targets", "").body, &live); err != nil {
		t.Fatal(err)
	}
	for _, tg := range live.Targets {
		if tg.TemplateID == "ship" {
			if r, _ := s.patch(t, tg.ID, `{"params":{"name":"a","order":1,"carrier":"c","eta":"d"}}`); r.code != 200 {
				t.Fatalf("give target %d the new param: %d %s", tg.ID, r.code, r.body)
			}
		}
	}
	if r := s.call(t, "PUT", "/v1/templates/ship", `{"channel":"inbox","body":"{{.name}} {{.eta}}","params":["name","eta"]}`); r.code != 200 {
		t.Fatalf("update: %d %s", r.code, r.body)
	}
	if r := s.call(t, "POST", "/v1/targets", target("ship", "inbox", `{"name":"a"}`)); r.code != 400 || !strings.Contains(r.errMsg(), "params: missing eta") {
		t.Errorf("after the update: %d %s, want 400 params: missing eta", r.code, r.body)
	}

	r = s.call(t, "DELETE", "/v1/templates/ship", "")
	if r.code != 409 || r.errMsg() != `template "ship" is used by 1 active or paused targets; delete them or change their template first` {
		t.Fatalf("delete in use: %d %s", r.code, r.body)
	}
	var list struct {
		Targets []struct {
			ID         int64  `json:"id"`
			TemplateID string `json:"template_id"`
		}
	}
	if err := json.Unmarshal(s.call(t, "GET", "/v1/targets", "").body, &list); err != nil {
		t.Fatal(err)
	}
	for _, tg := range list.Targets {
		if tg.TemplateID == "ship" {
			if r := s.call(t, "DELETE", "/v1/targets/"+strconv.FormatInt(tg.ID, 10), ""); r.code != 204 {
				t.Fatalf("delete target: %d %s", r.code, r.body)
			}
		}
	}
	if r := s.call(t, "DELETE", "/v1/templates/ship", ""); r.code != 204 {
		t.Fatalf("delete once unused: %d %s", r.code, r.body)
	}
	if r := s.call(t, "POST", "/v1/targets", target("ship", "inbox", `{"name":"a","eta":"b"}`)); r.code != 400 || !strings.Contains(r.errMsg(), "template_id: unknown template") {
		t.Errorf("target of a deleted template: %d %s", r.code, r.body)
	}
}

// TestTemplatesSyncRestoresRedis: a sync pass writes every template to
// Redis again (after a flush, or a write that failed after its commit),
// tombstones included, and never puts back an older version.
func TestTemplatesSyncRestoresRedis(t *testing.T) {
	t.Parallel()
	s := newTemplateServer(t)
	ctx := context.Background()
	for _, body := range []string{`{"name":"a","body":"A {{.x}}","params":["x"]}`, `{"name":"b","body":"B"}`} {
		if r := s.call(t, "POST", "/v1/templates", body); r.code != 201 {
			t.Fatalf("create: %d %s", r.code, r.body)
		}
	}
	if r := s.call(t, "DELETE", "/v1/templates/b", ""); r.code != 204 {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}
	keys := []string{templates.Key(s.prefix, "a"), templates.Key(s.prefix, "b")}
	if err := s.rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	// A newer version in Redis than in MySQL would be a write racing the
	// pass: the pass leaves it.
	if err := templates.Store(ctx, s.rdb, s.prefix, templates.Template{Name: "c", Body: "newer", Version: 9}); err != nil {
		t.Fatal(err)
	}
	if r := s.call(t, "POST", "/v1/templates", `{"name":"c","body":"older"}`); r.code != 201 {
		t.Fatalf("create c: %d %s", r.code, r.body)
	}
	if err := s.templates.Sync(ctx); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if got, ok, err := templates.Load(ctx, s.rdb, s.prefix, "a"); err != nil || !ok || got.Version != 1 || got.Body != "A {{.x}}" {
		t.Errorf("a after the sync: %+v %v %v", got, ok, err)
	}
	if v, err := s.rdb.HGet(ctx, templates.Key(s.prefix, "b"), "v").Result(); err != nil || v != "2" {
		t.Errorf("b's tombstone after the sync: version %q %v, want 2", v, err)
	}
	if got, _, _ := templates.Load(ctx, s.rdb, s.prefix, "c"); got.Version != 9 {
		t.Errorf("c after the sync: version %d, want the newer 9 kept", got.Version)
	}
}

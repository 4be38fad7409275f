package templates

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/notiflow/notiflow/lib/testkit"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	ok := Template{Name: "order", Subject: "Order {{.id}}", Body: "Hi {{.name}}, order {{.id}} {{if .late}}is late{{end}}", Params: []string{"name", "late", "id"}}
	tests := []struct {
		name      string
		give      func(*Template)
		wantField string
		wantMsg   string
	}{
		{"valid", func(*Template) {}, "", ""},
		{"no name", func(t *Template) { t.Name = " " }, "name", "is required"},
		{"slash in name", func(t *Template) { t.Name = "a/b" }, "name", "without /"},
		{"bad channel", func(t *Template) { t.Channel = "sms" }, "channel", `unknown channel "sms"`},
		{"no body", func(t *Template) { t.Body = "" }, "body", "is required"},
		{"body does not parse", func(t *Template) { t.Body = "Hi {{.name" }, "body", "does not parse"},
		{"subject does not parse", func(t *Template) { t.Subject = "{{if .id}}x" }, "subject", "does not parse"},
		{"undeclared param", func(t *Template) { t.Params = []string{"name", "late"} }, "params", "subject refers to {{.id}}, which is not declared"},
		{"unused param", func(t *Template) { t.Params = append(t.Params, "extra") }, "params", "declared but not used by subject or body: extra"},
		{"bad param name", func(t *Template) { t.Params = append(t.Params, "a-b") }, "params", `"a-b" is not a parameter name`},
		{"param twice", func(t *Template) { t.Params = append(t.Params, "id") }, "params", `"id" is declared twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			give := ok
			give.Params = slices.Clone(ok.Params)
			tt.give(&give)
			got, err := Check(give)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				if !slices.Equal(got.Params, []string{"id", "late", "name"}) {
					t.Fatalf("params %v, want sorted", got.Params)
				}
				return
			}
			fe, isField := err.(*FieldError)
			if !isField || fe.Field != tt.wantField || !strings.Contains(fe.Msg, tt.wantMsg) {
				t.Fatalf("Check: %v, want %s: ...%s...", err, tt.wantField, tt.wantMsg)
			}
		})
	}
}

func TestRefs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give string
		want []string
	}{
		{"plain", nil},
		{"{{.a}} and {{.b}} and {{.a}}", []string{"a", "b"}},
		{"{{if .x}}{{.y}}{{else}}{{.z}}{{end}}", []string{"x", "y", "z"}},
		{"{{range .items}}{{.title}} {{$.who}}{{end}}", []string{"items", "who"}},
		{"{{with .user}}{{.name}}{{end}}", []string{"user"}},
		{"{{printf \"%d\" .n}}", []string{"n"}},
	}
	for _, tt := range tests {
		got, err := TextRefs("t", tt.give)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("TextRefs(%q) = %v, %v; want %v", tt.give, got, err, tt.want)
		}
	}
}

func TestMissing(t *testing.T) {
	t.Parallel()
	got, err := Missing([]string{"b", "a", "c"}, []byte(`{"c":null}`))
	if err != nil || !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Missing = %v, %v; want [a b]", got, err)
	}
	if got, err := Missing([]string{"a"}, nil); err != nil || !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Missing with no params = %v, %v", got, err)
	}
	if _, err := Missing([]string{"a"}, []byte(`[1]`)); err == nil {
		t.Fatal("Missing accepted an array")
	}
}

func TestBuiltinParses(t *testing.T) {
	t.Parallel()
	b := Builtin()
	if len(b) == 0 || b["bench"] == "" {
		t.Fatalf("built-in templates: %v", b)
	}
	for id, text := range b {
		if _, err := Parse(id, text); err != nil {
			t.Errorf("built-in %q: %v", id, err)
		}
	}
}

// TestStoreAndLoad: against a real Redis, a write never replaces a higher
// version (writes arriving out of order leave the newest), and a
// tombstone reads as absent.
func TestStoreAndLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testkit.Redis(t)
	if _, ok, err := Load(ctx, rdb, prefix, "order"); ok || err != nil {
		t.Fatalf("Load of nothing: %v %v", ok, err)
	}
	v2 := Template{Name: "order", Body: "v2 {{.id}}", Params: []string{"id"}, Version: 2}
	v1 := Template{Name: "order", Body: "v1", Params: []string{}, Version: 1}
	for _, tpl := range []Template{v2, v1} {
		if err := Store(ctx, rdb, prefix, tpl); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := Load(ctx, rdb, prefix, "order")
	if err != nil || !ok || got.Version != 2 || got.Body != v2.Body {
		t.Fatalf("Load = %+v %v %v, want version 2", got, ok, err)
	}
	if err := Store(ctx, rdb, prefix, Template{Name: "order", Version: 3, Deleted: true}); err != nil {
		t.Fatal(err)
	}
	if err := Store(ctx, rdb, prefix, v2); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := Load(ctx, rdb, prefix, "order"); ok || err != nil {
		t.Fatalf("Load after the tombstone = %+v %v %v, want absent", got, ok, err)
	}
}

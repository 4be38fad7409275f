package domain

import (
	"errors"
	"testing"
)

func TestBuiltinTemplatesParse(t *testing.T) {
	t.Parallel()
	tpls, err := NewTemplates(nil)
	if err != nil {
		t.Fatalf("NewTemplates: %v", err)
	}
	for _, id := range []string{"welcome", "reminder", "digest", "bench"} {
		if _, ok := tpls.set[id]; !ok {
			t.Errorf("built-in template %q missing", id)
		}
	}
}

func TestVersionFollowsTheText(t *testing.T) {
	t.Parallel()
	a, err := NewTemplates(map[string]string{"x": "Hi {{.name}}"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewTemplates(map[string]string{"x": "Hello {{.name}}"})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := NewTemplates(map[string]string{"x": "Hi {{.name}}"})
	if v := a.Version("x"); len(v) != 16 || v == b.Version("x") || v != again.Version("x") {
		t.Fatalf("versions %q (edited: %q, same text again: %q): want 16 hex digits, new on an edit, equal for the same text",
			v, b.Version("x"), again.Version("x"))
	}
	if v := a.Version("nope"); v != "" {
		t.Fatalf("version of an unknown template %q, want none", v)
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	tpls, err := NewTemplates(map[string]string{
		"plain":   "static text",
		"welcome": "Hi {{.name}}, you are {{.age}}",
	})
	if err != nil {
		t.Fatalf("NewTemplates: %v", err)
	}
	tests := []struct {
		name    string
		id      string
		params  string
		want    string
		wantErr error
	}{
		{name: "override wins", id: "welcome", params: `{"name":"Ada","age":36}`, want: "Hi Ada, you are 36"},
		{name: "static ignores params", id: "plain", params: `not json`, want: "static text"},
		{name: "bench ignores params", id: "bench", params: `{"n":7}`, want: "notiflow benchmark notification"},
		{name: "reminder", id: "reminder", params: `{"name":"Alice","what":"stand-up"}`, want: "Reminder for Alice: stand-up"},
		{name: "escaped string", id: "welcome", params: `{"name":"A\"da \u00e9","age":true}`, want: "Hi A\"da é, you are true"},
		{name: "object param takes the general path", id: "welcome", params: `{"name":{"a":1},"age":1}`, want: "Hi map[a:1], you are 1"},
		{name: "large number kept exact", id: "digest", params: `{"count":12345678901234567890}`, want: "You have 12345678901234567890 new items since your last visit."},
		{name: "unknown", id: "nope", params: `{}`, wantErr: ErrUnknownTemplate},
		{name: "missing param", id: "welcome", params: `{"name":"Ada"}`, wantErr: ErrRender},
		{name: "params not an object", id: "welcome", params: `[1,2]`, wantErr: ErrRender},
		{name: "null params", id: "reminder", params: `null`, wantErr: ErrRender},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tpls.Render(tt.id, []byte(tt.params))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Render error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Render = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestNewTemplatesRejectsBadTemplate(t *testing.T) {
	t.Parallel()
	_, err := NewTemplates(map[string]string{"broken": "{{.name"})
	if err == nil {
		t.Fatal("want a parse error")
	}
}

func TestMarkers(t *testing.T) {
	t.Parallel()
	st, tok, _, err := ParseMarker(InflightMarker("abc-1"))
	if err != nil || st != MarkerInflight || tok != "abc-1" {
		t.Fatalf("inflight marker: %v %q %v", st, tok, err)
	}
	in := Outcome{Status: 1, Attempts: 3, ProviderCode: 200}
	st, _, out, err := ParseMarker(DoneMarker(in))
	if err != nil || st != MarkerDone || out.Status != in.Status || out.Attempts != 3 || out.ProviderCode != 200 {
		t.Fatalf("done marker %q: %v %+v %v", DoneMarker(in), st, out, err)
	}
	if DoneMarker(in) != "done:delivered:3:200" {
		t.Fatalf("done marker = %q", DoneMarker(in))
	}
	for _, bad := range []string{"", "done:", "done:delivered:x:1", "done:nope:1:1", "other"} {
		if _, _, _, err := ParseMarker(bad); !errors.Is(err, ErrBadMarker) {
			t.Errorf("ParseMarker(%q) = %v, want ErrBadMarker", bad, err)
		}
	}
}

// The reflection-free path for simple templates prints what text/template
// prints.
func TestSimpleTemplatesMatchTextTemplate(t *testing.T) {
	t.Parallel()
	tpls, err := NewTemplates(map[string]string{"t": "a{{.s}}b{{.n}}c{{.b}}{{.s}}"})
	if err != nil {
		t.Fatal(err)
	}
	c := tpls.set["t"]
	if c.parts == nil {
		t.Fatal("template not recognised as simple")
	}
	for _, params := range []string{
		`{"s":"x","n":1,"b":true}`,
		`{"s":"h\u00e9llo \"q\"","n":-1.5e3,"b":false}`,
		`{"s":"ünïcode","n":12345678901234567890,"b":true,"extra":[1]}`,
		`  {"s":"","n":0,"b":false}  `,
		`{ "x" : {"s":"inner","n":[1,"]}"]} , "s" : "a,b}" , "n" : 2 , "b" : true , "y":"\\"}`,
		`{"\u0073":"escaped key","n":1,"b":true}`,
		`{"s":"first","s":"last","n":1,"b":true}`,
	} {
		fast, ok, ferr := c.renderSimple("t", []byte(params))
		slow, serr := c.render("t", []byte(params))
		if !ok || ferr != nil || serr != nil || fast != slow {
			t.Errorf("%s: simple %q (%v, %v), general %q (%v)", params, fast, ok, ferr, slow, serr)
		}
	}
	for _, params := range []string{`{"s":"x","n":1}`, `[1]`, `{"s":`} {
		_, _, ferr := c.renderSimple("t", []byte(params))
		_, serr := c.render("t", []byte(params))
		if !errors.Is(ferr, ErrRender) || !errors.Is(serr, ErrRender) {
			t.Errorf("%s: simple %v, general %v; want ErrRender from both", params, ferr, serr)
		}
	}
}

// FuzzSimpleTemplate checks that the reflection-free path agrees with
// text/template whenever it takes the input.
func FuzzSimpleTemplate(f *testing.F) {
	for _, s := range []string{`{"s":"x","n":1,"b":true}`, `{"s":"a\"b","n":-0.5,"b":false,"z":{"s":1}}`, `{}`, `null`, `[]`, `{"s":"\ud83d\ude00","n":1e5,"b":true}`} {
		f.Add(s)
	}
	tpls, err := NewTemplates(map[string]string{"t": "<{{.s}}|{{.n}}|{{.b}}>"})
	if err != nil {
		f.Fatal(err)
	}
	c := tpls.set["t"]
	f.Fuzz(func(t *testing.T, params string) {
		fast, ok, ferr := c.renderSimple("t", []byte(params))
		if !ok {
			return
		}
		slow, serr := c.render("t", []byte(params))
		if (ferr == nil) != (serr == nil) || fast != slow {
			t.Fatalf("%q: simple %q (%v), general %q (%v)", params, fast, ferr, slow, serr)
		}
	})
}

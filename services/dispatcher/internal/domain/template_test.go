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
		{name: "bench without n", id: "bench", params: ``, want: "notiflow benchmark notification"},
		{name: "bench with n", id: "bench", params: `{"n":7}`, want: "notiflow benchmark notification #7"},
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

package service

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadTemplatesFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"welcome":"Hey {{.name}}","promo":"Sale: {{.what}}"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tpls, err := loadTemplates(good)
	if err != nil {
		t.Fatalf("loadTemplates: %v", err)
	}
	if got, _ := tpls.Render("welcome", []byte(`{"name":"Ann"}`)); got != "Hey Ann" {
		t.Fatalf("file did not override the built-in: %q", got)
	}
	if got, _ := tpls.Render("digest", []byte(`{"count":2}`)); !strings.HasPrefix(got, "You have 2") {
		t.Fatalf("built-in lost: %q", got)
	}
	for name, content := range map[string]string{"notjson.json": `{"a":`, "badtpl.json": `{"a":"{{.x"}`, "array.json": `["a"]`} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := loadTemplates(path); err == nil || !strings.Contains(err.Error(), "NOTIFLOW_TEMPLATES_FILE") {
			t.Errorf("%s: error %v, want one naming NOTIFLOW_TEMPLATES_FILE", name, err)
		}
	}
	if _, err := loadTemplates(filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "NOTIFLOW_TEMPLATES_FILE") {
		t.Errorf("missing file: %v", err)
	}
}

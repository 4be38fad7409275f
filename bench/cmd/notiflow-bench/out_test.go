package main

import (
	"path/filepath"
	"testing"
)

func TestOutPathKeepsAnAbsolutePath(t *testing.T) {
	t.Parallel()
	root := filepath.FromSlash("/repo")
	tests := []struct{ give, want string }{
		{"bench/results/latest.json", filepath.FromSlash("/repo/bench/results/latest.json")},
		{filepath.FromSlash("/tmp/run.json"), filepath.FromSlash("/tmp/run.json")},
		{"../x.json", filepath.FromSlash("/x.json")},
	}
	for _, tt := range tests {
		if got := outPath(root, tt.give); got != tt.want {
			t.Errorf("outPath(%q, %q) = %q, want %q", root, tt.give, got, tt.want)
		}
	}
}

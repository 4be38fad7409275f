package testkit

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRepoRoot: from this package's directory the root is two levels up,
// where go.work is.
func TestRepoRoot(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Dir(filepath.Dir(wd)); root != want {
		t.Fatalf("RepoRoot() = %s, want %s", root, want)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatal(err)
	}
}

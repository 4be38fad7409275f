package testkit

import (
	"fmt"
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

// DepPids finds the dependencies make test runs (make deps starts them)
// from their pid files: each a live process of the right program.
func TestDepPids(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	pids := DepPids(root)
	for name, comm := range map[string]string{"kafka": "java", "mariadb": "mariadbd", "redis": "redis-server"} {
		pid, ok := pids[name]
		if !ok {
			t.Fatalf("no pid of %s under %s/.deps (start it with make deps)", name, root)
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatalf("%s: pid %d: %v", name, pid, err)
		}
		if got, _ := parseStat(string(stat)); got != comm {
			t.Fatalf("%s: pid %d is %q, want %q", name, pid, got, comm)
		}
	}
	if n := len(DepPids(t.TempDir())); n != 0 {
		t.Fatalf("DepPids of a directory without .deps: %d pids, want 0", n)
	}
}

package testkit

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// RepoRoot returns the repository's root: the first directory up from the
// working directory that holds go.work.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work above the working directory")
		}
		dir = parent
	}
}

// DepPids returns the pids of the local Kafka, MariaDB and Redis that
// `make deps` (scripts/deps.sh) started under root, by name ("kafka",
// "mariadb", "redis"), from their pid files in root/.deps; a dependency
// without a readable pid file is left out.
func DepPids(root string) map[string]int {
	files := map[string]string{"kafka": "kafka/kafka.pid", "mariadb": "mariadb/mariadbd.pid", "redis": "redis/redis.pid"}
	out := map[string]int{}
	for name, f := range files {
		b, err := os.ReadFile(filepath.Join(root, ".deps", f))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			out[name] = pid
		}
	}
	return out
}

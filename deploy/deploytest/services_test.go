package deploytest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The services' config structs are the source of truth for the variables
// each one reads and their defaults. The checks learn them from the
// services themselves: each service's binary is built once per test run
// (as its Dockerfile does: GOWORK=off, CGO_ENABLED=0) and run with
// -print-config in a given environment, which prints every variable it
// reads with its effective value (secrets redacted) and exits 2 naming each
// variable that Validate rejects. The deployment files are then checked
// against exactly what the services would read at start.

// services are the notiflow services, each with its own module, image
// (the Dockerfile with SERVICE set to its name) and Deployment of the
// same name.
var services = []string{"scheduler", "dispatcher", "sink"}

// varInfo is one variable a service reads, with its effective value.
type varInfo struct {
	Name  string
	Value string
}

// printedConfig is what -print-config shows for one environment.
type printedConfig struct {
	Vars []varInfo
	// Invalid is the service's complaint (stderr) when it exits 2: a
	// value that does not parse or that Validate rejects.
	Invalid string
}

// value returns the effective value of the variable name.
func (r printedConfig) value(tb testing.TB, name string) string {
	tb.Helper()
	for _, v := range r.Vars {
		if v.Name == name {
			return v.Value
		}
	}
	tb.Fatalf("the service reads no variable %s", name)
	return ""
}

func (r printedConfig) duration(tb testing.TB, name string) time.Duration {
	tb.Helper()
	d, err := time.ParseDuration(r.value(tb, name))
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return d
}

func (r printedConfig) int(tb testing.TB, name string) int {
	tb.Helper()
	n, err := strconv.Atoi(r.value(tb, name))
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return n
}

// httpPort is the port of the effective NOTIFLOW_HTTP_ADDR.
func (r printedConfig) httpPort(tb testing.TB) int {
	tb.Helper()
	addr := r.value(tb, "NOTIFLOW_HTTP_ADDR")
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		tb.Fatalf("NOTIFLOW_HTTP_ADDR=%q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		tb.Fatalf("NOTIFLOW_HTTP_ADDR=%q: port: %v", addr, err)
	}
	return n
}

// reads reports whether the service reads the variable name.
func (r printedConfig) reads(name string) bool {
	for _, v := range r.Vars {
		if v.Name == name {
			return true
		}
	}
	return false
}

// serviceConfig is a service's built binary.
type serviceConfig struct {
	name   string
	modDir string // services/<name>
	bin    string
}

var (
	binsMu sync.Mutex
	bins   = map[string]*serviceConfig{}
	binDir string // created lazily, removed by TestMain
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// configOf returns service name with its binary built (once per test
// binary).
func configOf(tb testing.TB, name string) *serviceConfig {
	tb.Helper()
	binsMu.Lock()
	defer binsMu.Unlock()
	if sc, ok := bins[name]; ok {
		return sc
	}
	sc, err := buildService(repoRoot(tb), name)
	if err != nil {
		tb.Fatalf("build %s: %v", name, err)
	}
	bins[name] = sc
	return sc
}

// buildService builds service name's binary as its Dockerfile does.
func buildService(root, name string) (*serviceConfig, error) {
	if binDir == "" {
		dir, err := os.MkdirTemp("", "deploytest-bin-")
		if err != nil {
			return nil, err
		}
		binDir = dir
	}
	sc := &serviceConfig{name: name, modDir: filepath.Join(root, "services", name), bin: filepath.Join(binDir, name)}
	cmd := exec.Command("go", "build", "-o", sc.bin, ".")
	cmd.Dir = sc.modDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build (in %s, GOWORK=off): %v\n%s", sc.modDir, err, out)
	}
	return sc, nil
}

// load runs the service with -print-config in env (nothing else: the
// test's own environment does not leak in). An invalid configuration
// (exit status 2) is reported in Invalid; any other failure fails tb.
func (sc *serviceConfig) load(tb testing.TB, env map[string]string) printedConfig {
	tb.Helper()
	cmd := exec.Command(sc.bin, "-print-config")
	cmd.Env = []string{}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var res printedConfig
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() == 2:
		res.Invalid = strings.TrimSpace(stderr.String())
	case err != nil:
		tb.Fatalf("%s -print-config: %v: %s", sc.name, err, stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		if line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			tb.Fatalf("%s -print-config: line %q is not NAME=value", sc.name, line)
		}
		res.Vars = append(res.Vars, varInfo{Name: name, Value: value})
	}
	return res
}

// vars lists the variables the service reads, with their defaults.
func (sc *serviceConfig) vars(tb testing.TB) printedConfig {
	tb.Helper()
	return sc.load(tb, map[string]string{})
}

// checkEnv runs the service's -print-config in env and fails tb unless
// every NOTIFLOW_* variable of env is one the service reads, the
// configuration is valid, and no effective value points at loopback (the
// defaults of the addresses do: a container must set them).
func (sc *serviceConfig) checkEnv(tb testing.TB, where string, env map[string]string) printedConfig {
	tb.Helper()
	res := sc.load(tb, env)
	for name := range env {
		if strings.HasPrefix(name, "NOTIFLOW_") && !res.reads(name) {
			tb.Errorf("%s: %s sets %s, which the %s does not read", where, sc.name, name, sc.name)
		}
	}
	if res.Invalid != "" {
		tb.Errorf("%s: %s: invalid configuration:\n%s", where, sc.name, res.Invalid)
	}
	for _, v := range res.Vars {
		if strings.Contains(v.Value, "127.0.0.1") || strings.Contains(v.Value, "localhost") {
			tb.Errorf("%s: %s: %s=%q points at loopback (its default); set it", where, sc.name, v.Name, v.Value)
		}
	}
	return res
}

// repoRoot is the directory holding go.work.
func repoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("no go.work above the test's directory")
		}
		dir = parent
	}
}

// TestServiceConfigs checks -print-config itself: each service prints
// every variable once, as NAME=value, reads the variables the deployment
// files rely on, and exits 2 naming a variable whose value does not parse
// or that its Validate rejects.
func TestServiceConfigs(t *testing.T) {
	for _, name := range services {
		t.Run(name, func(t *testing.T) {
			sc := configOf(t, name)
			res := sc.vars(t)
			seen := map[string]bool{}
			for _, v := range res.Vars {
				if !strings.HasPrefix(v.Name, "NOTIFLOW_") || seen[v.Name] {
					t.Errorf("-print-config: %s is not a NOTIFLOW_* variable printed once", v.Name)
				}
				seen[v.Name] = true
			}
			for _, want := range []string{"NOTIFLOW_HTTP_ADDR", "NOTIFLOW_SHUTDOWN_TIMEOUT", "NOTIFLOW_LOG_LEVEL",
				"NOTIFLOW_KAFKA_BROKERS", "NOTIFLOW_KAFKA_PARTITIONS", "NOTIFLOW_TOPIC_DUE", "NOTIFLOW_TOPIC_DISPATCHED", "NOTIFLOW_TOPIC_DLQ"} {
				if !res.reads(want) {
					t.Errorf("%s does not read %s", name, want)
				}
			}
			for _, bad := range []map[string]string{
				{"NOTIFLOW_KAFKA_PARTITIONS": "many"}, // does not parse
				{"NOTIFLOW_SHUTDOWN_TIMEOUT": "1ms"},  // Validate rejects it
			} {
				for k := range bad {
					got := sc.load(t, bad)
					if !strings.Contains(got.Invalid, k) {
						t.Errorf("%s -print-config with %s=%s: exit 2 naming %s expected, got %q", name, k, bad[k], k, got.Invalid)
					}
				}
			}
			t.Logf("%s reads %d variables", name, len(res.Vars))
		})
	}
}

package deploytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The services' config structs are the source of truth for the variables
// each one reads. They live in internal packages, which this module may not
// import, so the checks build a tiny probe program *inside* each service's
// module through `go build -overlay` (nothing is written to the service's
// folder): it fills the service's Config with lib/config.LoadFrom from a
// given environment, calls its Validate, and prints every variable with its
// default and effective value. The deployment files are then checked
// against exactly what the services would read at start.

// services are the notiflow services, each with its own module, image
// (the Dockerfile with SERVICE set to its name) and Deployment of the
// same name.
var services = []string{"scheduler", "dispatcher", "sink"}

// varInfo is one variable a service reads.
type varInfo struct {
	Name       string `json:"name"`
	Default    string `json:"default"`
	HasDefault bool   `json:"has_default"`
	Value      string `json:"value"`
}

// probeResult is what the probe prints for one environment.
type probeResult struct {
	Vars          []varInfo `json:"vars"`
	LibVars       []string  `json:"lib_vars"` // lib/config.Vars, to cross-check the probe's walk
	LoadError     string    `json:"load_error"`
	ValidateError string    `json:"validate_error"`
	HasValidate   bool      `json:"has_validate"`
}

// value returns the effective value of the variable name.
func (r probeResult) value(tb testing.TB, name string) string {
	tb.Helper()
	for _, v := range r.Vars {
		if v.Name == name {
			return v.Value
		}
	}
	tb.Fatalf("the service reads no variable %s", name)
	return ""
}

func (r probeResult) duration(tb testing.TB, name string) time.Duration {
	tb.Helper()
	d, err := time.ParseDuration(r.value(tb, name))
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return d
}

func (r probeResult) int(tb testing.TB, name string) int {
	tb.Helper()
	n, err := strconv.Atoi(r.value(tb, name))
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return n
}

// httpPort is the port of the effective NOTIFLOW_HTTP_ADDR.
func (r probeResult) httpPort(tb testing.TB) int {
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
func (r probeResult) reads(name string) bool {
	for _, v := range r.Vars {
		if v.Name == name {
			return true
		}
	}
	return false
}

// serviceConfig is a service's config package and its built probe.
type serviceConfig struct {
	name       string
	modDir     string // services/<name>
	importPath string // of the package declaring Config
	bin        string
}

var (
	probesMu sync.Mutex
	probes   = map[string]*serviceConfig{}
	probeDir string // created lazily, removed by TestMain
)

func TestMain(m *testing.M) {
	code := m.Run()
	if probeDir != "" {
		os.RemoveAll(probeDir)
	}
	os.Exit(code)
}

// configOf returns the built probe of service name (built once per test
// binary).
func configOf(tb testing.TB, name string) *serviceConfig {
	tb.Helper()
	probesMu.Lock()
	defer probesMu.Unlock()
	if sc, ok := probes[name]; ok {
		return sc
	}
	sc, err := buildProbe(repoRoot(tb), name)
	if err != nil {
		tb.Fatalf("config probe for %s: %v", name, err)
	}
	probes[name] = sc
	return sc
}

// load runs the probe with env (nothing else: the test's own environment
// does not leak in).
func (sc *serviceConfig) load(tb testing.TB, env map[string]string) probeResult {
	tb.Helper()
	in, err := json.Marshal(map[string]any{"env": env})
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(sc.bin)
	cmd.Env = []string{}
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("config probe for %s: %v: %s", sc.name, err, stderr.String())
	}
	var res probeResult
	if err := json.Unmarshal(out, &res); err != nil {
		tb.Fatalf("config probe for %s: decode %q: %v", sc.name, out, err)
	}
	return res
}

// vars lists the variables the service reads, with their defaults.
func (sc *serviceConfig) vars(tb testing.TB) probeResult {
	tb.Helper()
	return sc.load(tb, map[string]string{})
}

// checkEnv loads env into the service's config and fails tb unless every
// NOTIFLOW_* variable of env is one the service reads, Load and Validate
// succeed, and no effective value points at loopback (the defaults of the
// addresses do: a container must set them).
func (sc *serviceConfig) checkEnv(tb testing.TB, where string, env map[string]string) probeResult {
	tb.Helper()
	res := sc.load(tb, env)
	for name := range env {
		if strings.HasPrefix(name, "NOTIFLOW_") && !res.reads(name) {
			tb.Errorf("%s: %s sets %s, which the %s does not read", where, sc.name, name, sc.name)
		}
	}
	if res.LoadError != "" {
		tb.Errorf("%s: %s: config load fails: %s", where, sc.name, res.LoadError)
	}
	if res.ValidateError != "" {
		tb.Errorf("%s: %s: config.Validate fails:\n%s", where, sc.name, res.ValidateError)
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

// findConfigPackage returns the directory (relative to modDir) of the
// package under internal/ that declares `type Config struct` with an
// env:"NOTIFLOW_HTTP_ADDR" field.
func findConfigPackage(modDir string) (string, error) {
	var found []string
	err := filepath.WalkDir(filepath.Join(modDir, "internal"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if ts.Name.Name != "Config" || !ok {
					continue
				}
				for _, field := range st.Fields.List {
					if field.Tag != nil && strings.Contains(field.Tag.Value, `env:"NOTIFLOW_HTTP_ADDR"`) {
						rel, _ := filepath.Rel(modDir, filepath.Dir(path))
						found = append(found, filepath.ToSlash(rel))
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if len(found) != 1 {
		return "", fmt.Errorf("want one package under %s/internal declaring type Config with env:\"NOTIFLOW_HTTP_ADDR\", found %v", modDir, found)
	}
	return found[0], nil
}

func modulePath(modDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(modDir, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", fmt.Errorf("%s/go.mod has no module line", modDir)
}

const probeSource = `// Code generated by deploy/deploytest; DO NOT EDIT. Never written to disk
// in the service's folder: it reaches the build through -overlay.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	libconfig "github.com/notiflow/notiflow/lib/config"
	target %q
)

type varOut struct {
	Name       string ` + "`json:\"name\"`" + `
	Default    string ` + "`json:\"default\"`" + `
	HasDefault bool   ` + "`json:\"has_default\"`" + `
	Value      string ` + "`json:\"value\"`" + `
}

func main() {
	var in struct{ Env map[string]string }
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var cfg target.Config
	out := map[string]any{}
	lookup := func(k string) (string, bool) { v, ok := in.Env[k]; return v, ok }
	if err := libconfig.LoadFrom(lookup, &cfg); err != nil {
		out["load_error"] = err.Error()
	}
	var validate func() error
	if v, ok := any(cfg).(interface{ Validate() error }); ok {
		validate = v.Validate
	} else if v, ok := any(&cfg).(interface{ Validate() error }); ok {
		validate = v.Validate
	}
	out["has_validate"] = validate != nil
	if validate != nil && out["load_error"] == nil {
		if err := validate(); err != nil {
			out["validate_error"] = err.Error()
		}
	}
	var vars []varOut
	walk(reflect.ValueOf(cfg), &vars)
	out["vars"] = vars
	out["lib_vars"] = libconfig.Vars(&cfg)
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

// walk mirrors lib/config: tagged exported fields, untagged nested structs
// walked (time.Time excepted).
func walk(v reflect.Value, vars *[]varOut) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, ok := sf.Tag.Lookup("env")
		switch {
		case ok && name != "" && name != "-":
			def, hasDef := sf.Tag.Lookup("default")
			*vars = append(*vars, varOut{Name: name, Default: def, HasDefault: hasDef, Value: format(v.Field(i))})
		case !ok && sf.Type.Kind() == reflect.Struct && sf.Type != reflect.TypeOf(time.Time{}):
			walk(v.Field(i), vars)
		}
	}
}

func format(f reflect.Value) string {
	if d, ok := f.Interface().(time.Duration); ok {
		return d.String()
	}
	if s, ok := f.Interface().([]string); ok {
		return strings.Join(s, ",")
	}
	return fmt.Sprint(f.Interface())
}
`

// buildProbe builds the config probe of service name with -overlay.
func buildProbe(root, name string) (*serviceConfig, error) {
	modDir := filepath.Join(root, "services", name)
	rel, err := findConfigPackage(modDir)
	if err != nil {
		return nil, err
	}
	mod, err := modulePath(modDir)
	if err != nil {
		return nil, err
	}
	if probeDir == "" {
		if probeDir, err = os.MkdirTemp("", "deploytest-probe-"); err != nil {
			return nil, err
		}
	}
	sc := &serviceConfig{name: name, modDir: modDir, importPath: mod + "/" + rel, bin: filepath.Join(probeDir, name)}
	src := filepath.Join(probeDir, name+".go")
	if err := os.WriteFile(src, fmt.Appendf(nil, probeSource, sc.importPath), 0o644); err != nil {
		return nil, err
	}
	// A directory that does not exist in the service: the overlay adds it
	// to the build only.
	virtual := filepath.Join(modDir, "internal", "zz_deploytest_probe", "main.go")
	overlay, err := json.Marshal(map[string]any{"Replace": map[string]string{virtual: src}})
	if err != nil {
		return nil, err
	}
	overlayFile := filepath.Join(probeDir, name+"-overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "build", "-overlay", overlayFile, "-o", sc.bin, "./internal/zz_deploytest_probe")
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build (in %s, GOWORK=off): %v\n%s", modDir, err, out)
	}
	return sc, nil
}

// TestServiceConfigs checks the probe itself: each service declares a
// Config with a Validate method, the probe's walk agrees with
// lib/config.Vars, and every service reads the variables the deployment
// files rely on.
func TestServiceConfigs(t *testing.T) {
	for _, name := range services {
		t.Run(name, func(t *testing.T) {
			sc := configOf(t, name)
			res := sc.vars(t)
			var names []string
			for _, v := range res.Vars {
				names = append(names, v.Name)
			}
			if !reflect.DeepEqual(names, res.LibVars) {
				t.Fatalf("probe walk %v disagrees with lib/config.Vars %v", names, res.LibVars)
			}
			if !res.HasValidate {
				t.Errorf("%s.Config has no Validate method", sc.importPath)
			}
			for _, want := range []string{"NOTIFLOW_HTTP_ADDR", "NOTIFLOW_SHUTDOWN_TIMEOUT", "NOTIFLOW_LOG_LEVEL",
				"NOTIFLOW_KAFKA_BROKERS", "NOTIFLOW_KAFKA_PARTITIONS", "NOTIFLOW_TOPIC_DUE", "NOTIFLOW_TOPIC_DISPATCHED", "NOTIFLOW_TOPIC_DLQ"} {
				if !res.reads(want) {
					t.Errorf("%s does not read %s", name, want)
				}
			}
			t.Logf("%s (%s) reads %d variables", name, sc.importPath, len(names))
		})
	}
}

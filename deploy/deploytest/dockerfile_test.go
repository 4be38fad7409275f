package deploytest

import (
	"debug/elf"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// No Docker engine runs here, so the Dockerfile (one at the repository
// root for every service, parameterised by the build arguments SERVICE and
// PORT) is checked in two ways for each service: its instructions are
// parsed with the service's arguments and checked, and the build stage is
// replayed without Docker (the same COPY set into an empty directory, the
// same go build flags), proving the service builds from its own go.mod with
// nothing else of the repository and yields a static binary.

// instruction is one Dockerfile instruction.
type instruction struct {
	cmd  string // upper case
	args string
}

// buildArgs are the build arguments of service name's image, as
// docker-compose.yml passes them.
func buildArgs(tb testing.TB, name string) map[string]string {
	tb.Helper()
	return map[string]string{"SERVICE": name, "PORT": strconv.Itoa(configOf(tb, name).vars(tb).httpPort(tb))}
}

// parseServiceDockerfile parses the repository's Dockerfile with the build
// arguments of service name.
func parseServiceDockerfile(tb testing.TB, name string) []instruction {
	tb.Helper()
	return parseDockerfile(tb, filepath.Join(repoRoot(tb), "Dockerfile"), buildArgs(tb, name))
}

// parseDockerfile splits a Dockerfile into instructions (comments dropped,
// continuation lines joined) and substitutes args for $NAME and ${NAME}
// (other variables are left as they are).
func parseDockerfile(tb testing.TB, path string, args map[string]string) []instruction {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, rest, _ := strings.Cut(cur.String(), " ")
		rest = os.Expand(rest, func(name string) string {
			if v, ok := args[name]; ok {
				return v
			}
			return "${" + name + "}"
		})
		out = append(out, instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(rest)})
		cur.Reset()
	}
	return out
}

// stages groups instructions by FROM.
func stages(ins []instruction) [][]instruction {
	var out [][]instruction
	for _, in := range ins {
		if in.cmd == "FROM" {
			out = append(out, nil)
		}
		if len(out) > 0 {
			out[len(out)-1] = append(out[len(out)-1], in)
		}
	}
	return out
}

// TestDockerfiles checks the Dockerfile as each service's image is built
// from it.
func TestDockerfiles(t *testing.T) {
	root := repoRoot(t)
	for _, name := range services {
		t.Run(name, func(t *testing.T) {
			st := stages(parseServiceDockerfile(t, name))
			if len(st) != 2 {
				t.Fatalf("want two stages (build, runtime), got %d", len(st))
			}
			build, runtime := st[0], st[1]
			// A build argument is visible only in the stages that declare it.
			for i, stage := range st {
				var declared []string
				for _, in := range stage {
					if in.cmd == "ARG" {
						declared = append(declared, in.args)
					}
				}
				for arg := range buildArgs(t, name) {
					if !slices.Contains(declared, arg) {
						t.Errorf("stage %d: no ARG %s (declared: %v)", i, arg, declared)
					}
				}
			}
			if from := build[0].args; !strings.HasPrefix(from, "golang:1.26") || !strings.HasSuffix(from, " AS build") {
				t.Errorf("build stage FROM %q, want golang:1.26... AS build", from)
			}
			if from := runtime[0].args; from != "gcr.io/distroless/static-debian12:nonroot" {
				t.Errorf("runtime stage FROM %q, want gcr.io/distroless/static-debian12:nonroot", from)
			}
			var env, runs string
			for _, in := range build {
				switch in.cmd {
				case "ENV":
					env += " " + in.args
				case "RUN":
					runs += "\n" + in.args
				case "COPY":
					// Sources exist relative to the build context (the root).
					fields := strings.Fields(in.args)
					for _, src := range fields[:len(fields)-1] {
						if strings.HasPrefix(src, "--") {
							continue
						}
						if _, err := os.Stat(filepath.Join(root, src)); err != nil {
							t.Errorf("COPY %s: %v (the build context is the repository root)", src, err)
						}
					}
				}
			}
			for _, want := range []string{"CGO_ENABLED=0", "GOWORK=off"} {
				if !strings.Contains(env, want) {
					t.Errorf("build stage: ENV %s missing", want)
				}
			}
			buildCmd := "cd services/" + name + " && go build -trimpath -ldflags=\"-s -w\" -o /out/" + name + " ."
			if !strings.Contains(runs, buildCmd) {
				t.Errorf("build stage: no RUN %q", buildCmd)
			}
			var user, entry, expose, binary string
			for _, in := range runtime {
				switch in.cmd {
				case "COPY":
					if f := strings.Fields(in.args); len(f) == 3 && f[0] == "--from=build" && f[1] == "/out/"+name {
						binary = f[2]
					}
				case "USER":
					user = in.args
				case "ENTRYPOINT":
					entry = in.args
				case "EXPOSE":
					expose = in.args
				case "RUN":
					t.Errorf("runtime stage: RUN %q (distroless has no shell)", in.args)
				}
			}
			if user != "65532:65532" && user != "65532" {
				t.Errorf("runtime stage: USER %q, want 65532 (nonroot)", user)
			}
			if binary == "" {
				t.Errorf("runtime stage: no COPY --from=build /out/%s", name)
			}
			if want := `["` + binary + `"]`; entry != want {
				t.Errorf("runtime stage: ENTRYPOINT %s, want %s (the service's binary)", entry, want)
			}
			if port := buildArgs(t, name)["PORT"]; expose != port {
				t.Errorf("EXPOSE %q, the service's default NOTIFLOW_HTTP_ADDR port is %s (the PORT argument)", expose, port)
			}
		})
	}
}

// TestDockerBuildStage replays the Dockerfile's build stage for each
// service without Docker:
// only the directories it COPYs, GOWORK=off, CGO_ENABLED=0 and its flags.
// The binary must be static (no ELF interpreter), so it runs on distroless.
func TestDockerBuildStage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three binaries")
	}
	root := repoRoot(t)
	for _, name := range services {
		t.Run(name, func(t *testing.T) {
			ctx := t.TempDir()
			for _, in := range stages(parseServiceDockerfile(t, name))[0] {
				if in.cmd != "COPY" {
					continue
				}
				fields := strings.Fields(in.args)
				dst := fields[len(fields)-1]
				for _, src := range fields[:len(fields)-1] {
					if strings.HasPrefix(src, "--") || strings.HasSuffix(src, "go.mod") || strings.HasSuffix(src, "go.sum") {
						continue // module files are copied again with their directory
					}
					target := filepath.Join(ctx, dst)
					if strings.HasPrefix(dst, "/src/") { // absolute in the image (WORKDIR /src)
						target = filepath.Join(ctx, strings.TrimPrefix(dst, "/src/"))
					}
					copyTree(t, filepath.Join(root, src), target)
				}
			}
			out := filepath.Join(t.TempDir(), name)
			goBuild(t, filepath.Join(ctx, "services", name), out, ".")
			checkStatic(t, out)
			hc := filepath.Join(t.TempDir(), "healthcheck")
			goBuild(t, filepath.Join(ctx, "healthcheck"), hc, "main.go")
			checkStatic(t, hc)
		})
	}
}

func goBuild(t *testing.T, dir, out, pkg string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "GOWORK=") || strings.HasPrefix(kv, "CGO_ENABLED=") || strings.HasPrefix(kv, "GOFLAGS=")
	}), "GOWORK=off", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build in %s (as in the Dockerfile): %v\n%s", dir, err, b)
	}
}

func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked; distroless/static has no libc", path)
		}
	}
}

// copyTree copies src (a file or a directory) to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}

// TestDockerignore: the build context sends what the Dockerfile COPYs and
// nothing of .deps/, .git or .env (Docker's rule: the last pattern that
// matches a path, or one of its parents, decides).
func TestDockerignore(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatalf(".dockerignore: %v (without it the whole repository, .deps/ included, is sent to the builder)", err)
	}
	var patterns []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	excluded := func(path string) bool {
		out := false
		for _, p := range patterns {
			neg := strings.HasPrefix(p, "!")
			p = strings.TrimSuffix(strings.TrimPrefix(p, "!"), "/")
			for q := path; q != "." && q != "/"; q = filepath.Dir(q) {
				if ok, _ := filepath.Match(p, q); ok {
					out = !neg
					break
				}
			}
		}
		return out
	}
	for _, name := range services {
		for _, in := range stages(parseServiceDockerfile(t, name))[0] {
			if in.cmd != "COPY" {
				continue
			}
			fields := strings.Fields(in.args)
			for _, src := range fields[:len(fields)-1] {
				if !strings.HasPrefix(src, "--") && excluded(strings.TrimSuffix(src, "/")) {
					t.Errorf("Dockerfile (SERVICE=%s): COPY %s, but .dockerignore excludes it", name, src)
				}
			}
		}
	}
	for _, p := range []string{".deps/kafka/data", ".git", ".env", "bin/scheduler", "bench/results"} {
		if !excluded(p) {
			t.Errorf(".dockerignore sends %s to the builder", p)
		}
	}
}

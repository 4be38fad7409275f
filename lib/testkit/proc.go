package testkit

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// LoopbackAddr returns a loopback host:port nobody listens on at the
// moment, for a server started next.
func LoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// FreeAddr is LoopbackAddr for a test: an error fails it.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	addr, err := LoopbackAddr()
	if err != nil {
		tb.Fatal(err)
	}
	return addr
}

type build struct {
	once sync.Once
	path string
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[string]*build{}
	binDir   string
)

// Binary builds the Go main package pkg (a directory relative to the
// test's working directory, or an import path) once per test process and
// returns the binary's path. Build errors fail the test. TestMain removes
// the binaries with RunTests.
func Binary(tb testing.TB, pkg string) string {
	tb.Helper()
	buildsMu.Lock()
	b, ok := builds[pkg]
	if !ok {
		b = &build{}
		builds[pkg] = b
	}
	n := len(builds) // a distinct file name per package
	if binDir == "" {
		binDir, b.err = os.MkdirTemp("", "testkit-bin-")
	}
	dir := binDir
	buildsMu.Unlock()
	b.once.Do(func() {
		if b.err != nil {
			return
		}
		abs, err := filepath.Abs(pkg)
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, fmt.Sprintf("%s-%d", filepath.Base(abs), n))
		b.err = GoBuild(context.Background(), "", pkg, b.path)
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

// GoBuild compiles the Go main package pkg, resolved in dir (empty: the
// working directory), into the binary out; an error carries the compiler's
// output.
func GoBuild(ctx context.Context, dir, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
	}
	return nil
}

// RunTests runs the tests of m and removes the binaries Binary built; a
// TestMain that uses Binary is os.Exit(testkit.RunTests(m)).
func RunTests(m *testing.M) int {
	code := m.Run()
	buildsMu.Lock()
	defer buildsMu.Unlock()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	return code
}

// ProcEnv is the environment of a process a test starts: the test
// process's own without its NOTIFLOW_* variables, plus env (KEY=VALUE).
func ProcEnv(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOTIFLOW_") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// Process is a started binary whose stdout and stderr go to a log file.
// Its methods are safe for concurrent use.
type Process struct {
	Cmd     *exec.Cmd
	LogPath string
	done    chan struct{}
	err     error
}

// Start runs bin with args and env as its whole environment, appending its
// output to logPath (created if missing).
func Start(bin string, env []string, logPath string, args ...string) (*Process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", logPath, err)
	}
	p := &Process{Cmd: exec.Command(bin, args...), LogPath: logPath, done: make(chan struct{})}
	p.Cmd.Env = env
	p.Cmd.Stdout, p.Cmd.Stderr = logf, logf
	if err := p.Cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { p.err = p.Cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.Cmd.Process.Signal(sig) }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err waits for the process to exit and returns its exit error (nil:
// status 0).
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Wait waits up to timeout for the process to exit and returns its exit
// error, or an error saying it still runs.
func (p *Process) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		return fmt.Errorf("%s did not exit within %s", p.Cmd.Path, timeout)
	}
}

// Logs returns what the process has written so far.
func (p *Process) Logs() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// LogTail returns the last n lines of the process's log.
func (p *Process) LogTail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Logs(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Proc is a process a test started with StartProc.
type Proc struct {
	*Process
	Name string
}

// StartProc runs bin with ProcEnv(env...), its output going to a log file
// in the test's temporary directory. When the test ends the process is
// killed if it still runs and, if the test failed, the last 30 lines of its
// log are logged.
func StartProc(tb testing.TB, name, bin string, env ...string) *Proc {
	tb.Helper()
	proc, err := Start(bin, ProcEnv(env...), filepath.Join(tb.TempDir(), name+".log"))
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	p := &Proc{Process: proc, Name: name}
	tb.Cleanup(func() {
		_ = p.Cmd.Process.Kill()
		<-p.done
		if tb.Failed() {
			tb.Logf("last log lines of %s:\n%s", name, p.LogTail(30))
		}
	})
	return p
}

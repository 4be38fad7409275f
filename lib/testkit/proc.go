package testkit

import (
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

// FreeAddr returns a loopback host:port nobody listens on at the moment,
// for a server the test starts next.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
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
		if out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
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

// Proc is a process a test started with StartProc. Its methods are safe
// for concurrent use.
type Proc struct {
	Name    string
	Cmd     *exec.Cmd
	LogPath string // stdout and stderr
	done    chan struct{}
	err     error
}

// StartProc runs bin with ProcEnv(env...), its output going to a log file
// in the test's temporary directory. When the test ends the process is
// killed if it still runs and, if the test failed, the last 30 lines of its
// log are logged.
func StartProc(tb testing.TB, name, bin string, env ...string) *Proc {
	tb.Helper()
	p := &Proc{Name: name, LogPath: filepath.Join(tb.TempDir(), name+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.LogPath)
	if err != nil {
		tb.Fatalf("create log of %s: %v", name, err)
	}
	p.Cmd = exec.Command(bin)
	p.Cmd.Env = ProcEnv(env...)
	p.Cmd.Stdout, p.Cmd.Stderr = logf, logf
	if err := p.Cmd.Start(); err != nil {
		logf.Close()
		tb.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.Cmd.Wait(); logf.Close(); close(p.done) }()
	tb.Cleanup(func() {
		_ = p.Cmd.Process.Kill()
		<-p.done
		if tb.Failed() {
			lines := strings.Split(strings.TrimSpace(p.Logs()), "\n")
			tb.Logf("last log lines of %s:\n%s", name, strings.Join(lines[max(0, len(lines)-30):], "\n"))
		}
	})
	return p
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error { return p.Cmd.Process.Signal(sig) }

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the process's exit error (nil: status 0) once Done is closed.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Wait waits up to timeout for the process to exit and returns its exit
// error, or an error saying it still runs.
func (p *Proc) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		return fmt.Errorf("%s did not exit within %s", p.Name, timeout)
	}
}

// Logs returns what the process has written so far.
func (p *Proc) Logs() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
)

// Services are the three binaries, by name.
var Services = []string{"scheduler", "dispatcher", "sink"}

// Build compiles services (all three when none is named) from root (the
// repository) into binDir.
func Build(ctx context.Context, root, binDir string, services ...string) error {
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", binDir, err)
	}
	if len(services) == 0 {
		services = Services
	}
	for _, s := range services {
		if err := testkit.GoBuild(ctx, filepath.Join(root, "services", s), ".", filepath.Join(binDir, s)); err != nil {
			return fmt.Errorf("build %s: %w", s, err)
		}
	}
	return nil
}

// Root finds the repository root from the working directory (the folder
// holding go.work).
func Root() (string, error) { return testkit.RepoRoot() }

// Proc is one running service process.
type Proc struct {
	Name    string // unique within the stack, e.g. dispatcher-2
	Service string // scheduler, dispatcher or sink
	Addr    string // HTTP address, host:port
	Env     map[string]string
	LogPath string
	Bin     string

	mu  sync.Mutex
	run *testkit.Process // the current run; nil before the first start
}

// Stack runs service processes from BinDir, each with Base env plus its own.
// It is safe for concurrent use.
type Stack struct {
	BinDir string
	LogDir string
	Base   map[string]string

	mu    sync.Mutex
	procs map[string]*Proc
}

// NewStack returns a Stack; LogDir is created.
func NewStack(binDir, logDir string, base map[string]string) (*Stack, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("create log dir: %w", err)
	}
	return &Stack{BinDir: binDir, LogDir: logDir, Base: base, procs: map[string]*Proc{}}, nil
}

// Start launches service under name with the stack's base env plus env, on
// a free port (NOTIFLOW_HTTP_ADDR), and waits until /readyz answers 200 or
// ctx ends.
func (s *Stack) Start(ctx context.Context, name, service string, env map[string]string) (*Proc, error) {
	addr, err := testkit.LoopbackAddr()
	if err != nil {
		return nil, err
	}
	return s.StartAt(ctx, name, service, addr, env)
}

// StartAt is Start on a given HTTP address.
func (s *Stack) StartAt(ctx context.Context, name, service, addr string, env map[string]string) (*Proc, error) {
	all := map[string]string{}
	for k, v := range s.Base {
		all[k] = v
	}
	for k, v := range env {
		all[k] = v
	}
	all["NOTIFLOW_HTTP_ADDR"] = addr
	p := &Proc{Name: name, Service: service, Addr: addr, Env: all, LogPath: filepath.Join(s.LogDir, name+".log"), Bin: filepath.Join(s.BinDir, service)}
	if err := p.start(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.procs[name] = p
	s.mu.Unlock()
	if err := p.WaitReady(ctx, 60*time.Second); err != nil {
		return p, err
	}
	return p, nil
}

func (p *Proc) start() error {
	env := os.Environ()
	keys := make([]string, 0, len(p.Env))
	for k := range p.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+p.Env[k])
	}
	run, err := testkit.Start(p.Bin, env, p.LogPath)
	if err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	p.mu.Lock()
	p.run = run
	p.mu.Unlock()
	return nil
}

// current returns the current run (nil before the first start).
func (p *Proc) current() *testkit.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.run
}

// WaitReady polls /readyz until it answers 200, the process exits, or
// timeout passes.
func (p *Proc) WaitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get("http://" + p.Addr + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		run := p.current()
		select {
		case <-run.Done():
			return fmt.Errorf("%s exited before it was ready: %v; log tail:\n%s", p.Name, run.Err(), p.LogTail(20))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %s; log tail:\n%s", p.Name, timeout, p.LogTail(20))
		}
	}
}

// Running reports whether the process is alive.
func (p *Proc) Running() bool {
	run := p.current()
	if run == nil {
		return false
	}
	select {
	case <-run.Done():
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() { p.signal(syscall.SIGKILL, 10*time.Second) }

// Term sends SIGTERM and waits up to grace for a clean exit, then kills.
// It returns the exit error (nil for exit status 0).
func (p *Proc) Term(grace time.Duration) error {
	if !p.signal(syscall.SIGTERM, grace) {
		p.Kill()
		return fmt.Errorf("%s did not exit within %s of SIGTERM", p.Name, grace)
	}
	if run := p.current(); run != nil {
		return run.Err()
	}
	return nil
}

func (p *Proc) signal(sig syscall.Signal, wait time.Duration) bool {
	run := p.current()
	if run == nil {
		return true
	}
	_ = run.Signal(sig)
	select {
	case <-run.Done():
		return true
	case <-time.After(wait):
		return false
	}
}

// Restart starts the process again with the same env and address and waits
// until it is ready. The previous run must have exited.
func (p *Proc) Restart(ctx context.Context) error {
	if p.Running() {
		return fmt.Errorf("restart %s: still running", p.Name)
	}
	if err := p.start(); err != nil {
		return err
	}
	return p.WaitReady(ctx, 60*time.Second)
}

// LogTail returns the last n lines of the process log.
func (p *Proc) LogTail(n int) string {
	if run := p.current(); run != nil {
		return run.LogTail(n)
	}
	return ""
}

// Procs returns the stack's processes of service (all when empty).
func (s *Stack) Procs(service string) []*Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Proc
	for _, p := range s.procs {
		if service == "" || p.Service == service {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// StopAll sends SIGTERM to every process and waits for them (killing what
// does not exit within grace).
func (s *Stack) StopAll(grace time.Duration) {
	var wg sync.WaitGroup
	for _, p := range s.Procs("") {
		wg.Go(func() { _ = p.Term(grace) })
	}
	wg.Wait()
}

// PeakRSSKiB returns the process's peak resident set size (VmHWM) in KiB,
// or 0 when it is not running or not readable.
func (p *Proc) PeakRSSKiB() int {
	pid := p.Pid()
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int
			_, _ = fmt.Sscanf(strings.TrimSpace(rest), "%d", &kb)
			return kb
		}
	}
	return 0
}

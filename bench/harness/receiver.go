package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/notiflow/notiflow/bench/receiver"
	"github.com/notiflow/notiflow/lib/testkit"
)

// ReceiverProc is the webhook benchmark's receiver (bench/receiver) run as
// a process of its own, so that its CPU is measured apart from the
// services'. Its methods are safe for concurrent use.
type ReceiverProc struct {
	// Addr is its HTTP address, 127.0.0.1:port.
	Addr string
	run  *testkit.Process
}

// StartReceiver runs `bin receive` (bin is notiflow-bench) on a free
// loopback port, verifying signatures with secret (given in its
// environment, receiver.SecretEnv) and answering each call after delay,
// its output appended to logPath; it waits until the receiver answers
// receiver.PathReady, the process exits, 30 s pass or ctx ends.
func StartReceiver(ctx context.Context, bin, logPath string, delay time.Duration, secret string) (*ReceiverProc, error) {
	addr, err := testkit.LoopbackAddr()
	if err != nil {
		return nil, err
	}
	env := []string{receiver.SecretEnv + "=" + secret}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOTIFLOW_") {
			env = append(env, kv)
		}
	}
	run, err := testkit.Start(bin, env, logPath, "receive", "-addr", addr, "-delay", delay.String())
	if err != nil {
		return nil, fmt.Errorf("start the webhook receiver: %w", err)
	}
	r := &ReceiverProc{Addr: addr, run: run}
	deadline := time.Now().Add(30 * time.Second)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get("http://" + addr + receiver.PathReady)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r, nil
			}
		}
		select {
		case <-run.Done():
			return nil, fmt.Errorf("webhook receiver exited before it was ready: %v; log tail:\n%s", run.Err(), run.LogTail(20))
		case <-ctx.Done():
			r.Stop(time.Second)
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.Stop(time.Second)
			return nil, fmt.Errorf("webhook receiver not ready within 30s; log tail:\n%s", run.LogTail(20))
		}
	}
}

// URL returns the webhook URL the receiver takes calls on.
func (r *ReceiverProc) URL() string { return "http://" + r.Addr + "/hook" }

// Pid returns the receiver's process id.
func (r *ReceiverProc) Pid() int { return r.run.Cmd.Process.Pid }

// Stats reads the receiver's counters (GET receiver.PathStats).
func (r *ReceiverProc) Stats(ctx context.Context) (receiver.Stats, error) {
	var s receiver.Stats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.Addr+receiver.PathStats, nil)
	if err != nil {
		return s, err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return s, fmt.Errorf("read the webhook receiver's stats: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("read the webhook receiver's stats: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("decode the webhook receiver's stats: %w", err)
	}
	return s, nil
}

// Stop sends SIGTERM and waits up to grace for the receiver to exit, then
// kills it.
func (r *ReceiverProc) Stop(grace time.Duration) {
	_ = r.run.Signal(syscall.SIGTERM)
	select {
	case <-r.run.Done():
		return
	case <-time.After(grace):
	}
	_ = r.run.Signal(syscall.SIGKILL)
	<-r.run.Done()
}

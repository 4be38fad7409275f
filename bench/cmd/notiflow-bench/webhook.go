package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/notiflow/notiflow/bench/harness"
	"github.com/notiflow/notiflow/bench/receiver"
	"github.com/notiflow/notiflow/lib/webhooksig"
)

// channelWebhook is the channel whose runs deliver to a receiver the
// benchmark starts; receiverName is the receiver's name among the
// processes whose CPU is measured.
const (
	channelWebhook = "webhook"
	receiverName   = "receiver"
)

// receiverResult is the webhook receiver's part of a result: its counters
// at the end of the run, its CPU seconds (measured apart from the
// services'), and the rate at which it answered.
type receiverResult struct {
	receiver.Stats
	CPUSec float64 `json:"cpuSec"`
	// CallsPerSecond is Distinct over the time from its first to its
	// latest call.
	CallsPerSecond float64 `json:"callsPerSecond"`
}

// webhookReceiver is the receiver of one webhook run and the secret every
// target of the run is signed with.
type webhookReceiver struct {
	proc   *harness.ReceiverProc
	secret string
}

// startWebhookReceiver generates the run's signing secret and starts the
// receiver (this binary's receive command) on a loopback port, its log in
// logDir. The scheduler and dispatchers allow webhooks to 127.0.0.1 only
// (harness.Isolation.ServiceEnv), which is where it listens.
func startWebhookReceiver(ctx context.Context, logDir string, delay time.Duration) (*webhookReceiver, error) {
	secret, err := webhooksig.Generate()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this binary for the webhook receiver: %w", err)
	}
	proc, err := harness.StartReceiver(ctx, self, filepath.Join(logDir, "receiver.log"), delay, secret)
	if err != nil {
		return nil, err
	}
	fmt.Printf("webhook receiver on %s (pid %d), answering after %s\n", proc.URL(), proc.Pid(), delay)
	return &webhookReceiver{proc: proc, secret: secret}, nil
}

// progress returns the receiver's part of a progress line ("" on a read
// error: the line is only informative).
func (w *webhookReceiver) progress(ctx context.Context) string {
	s, err := w.proc.Stats(ctx)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("  received %7d", s.Distinct)
}

// result reads the receiver's counters; cpuSec is its CPU seconds.
func (w *webhookReceiver) result(ctx context.Context, cpuSec float64) (*receiverResult, error) {
	s, err := w.proc.Stats(ctx)
	if err != nil {
		return nil, err
	}
	r := &receiverResult{Stats: s, CPUSec: cpuSec}
	if d := s.LastAt.Sub(s.FirstAt).Seconds(); d > 0 {
		r.CallsPerSecond = float64(int(float64(s.Distinct) / d))
	}
	return r, nil
}

// check returns an error naming every way the receiver saw the run go
// wrong: a duplicate, a call without Idempotency-Key, a signature that did
// not verify, or not every one of the eligible occurrences answered.
func (r *receiverResult) check(eligible int64) error {
	var bad []string
	if r.Duplicates > 0 {
		bad = append(bad, fmt.Sprintf("%d duplicate call(s)", r.Duplicates))
	}
	if r.MissingIdempotencyKey > 0 {
		bad = append(bad, fmt.Sprintf("%d call(s) without Idempotency-Key", r.MissingIdempotencyKey))
	}
	if r.BadSignatures > 0 {
		bad = append(bad, fmt.Sprintf("%d call(s) whose signature did not verify", r.BadSignatures))
	}
	if r.Distinct != eligible {
		bad = append(bad, fmt.Sprintf("%d distinct occurrences answered of %d", r.Distinct, eligible))
	}
	if len(bad) > 0 {
		return fmt.Errorf("webhook receiver: %s", strings.Join(bad, ", "))
	}
	return nil
}

// String is the report's line about the receiver.
func (r *receiverResult) String() string {
	return fmt.Sprintf("webhook receiver: calls %d, distinct %d, duplicates %d, missing Idempotency-Key %d, bad signatures %d, %.0f calls/s (first to last call), CPU %.2f s",
		r.Calls, r.Distinct, r.Duplicates, r.MissingIdempotencyKey, r.BadSignatures, r.CallsPerSecond, r.CPUSec)
}

package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/notiflow/notiflow/lib/benchreport"
)

// BenchmarkRequest is the body of POST /admin/benchmarks.
type BenchmarkRequest struct {
	Notifications int    `json:"notifications"`
	Recipients    int    `json:"recipients"`
	Channel       string `json:"channel"`
	SimLatencyMs  int    `json:"sim_latency_ms,omitempty"`
	WebhookURL    string `json:"webhook_url,omitempty"`
	// WebhookSecret signs every target of a webhook run (never returned).
	WebhookSecret string `json:"webhook_secret,omitempty"`
}

// Run is a benchmark run as GET /admin/benchmarks/{id} returns it; its
// progress and report are in lib/benchreport's format.
type Run struct {
	ID        string               `json:"id"`
	Status    string               `json:"status"` // creating, waiting, running, done, failed, cancelled
	Params    BenchmarkRequest     `json:"params"`
	CreatedAt time.Time            `json:"createdAt"`
	DueAt     time.Time            `json:"dueAt"`
	SetupSec  float64              `json:"setupSec"`
	Progress  benchreport.Progress `json:"progress"`
	Report    *benchreport.Report  `json:"report,omitempty"`
	Error     string               `json:"error,omitempty"`
}

// Finished reports whether the run reached a final status.
func (r *Run) Finished() bool {
	return r.Status == "done" || r.Status == "failed" || r.Status == "cancelled"
}

// Admin is a client of the scheduler's HTTP API.
type Admin struct {
	Base  string // http://host:port
	Token string
	HTTP  *http.Client
}

// Do sends a JSON request and decodes a JSON answer into out (when not
// nil). A status >= 300 is an error carrying the body.
func (a *Admin) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.Base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if a.Token != "" {
		req.Header.Set("Authorization", "Bearer "+a.Token)
	}
	client := a.HTTP
	if client == nil {
		client = &http.Client{Timeout: 60 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

// startTimeout bounds the answer to a run's start, which comes once the
// run's targets are stored: about 35 s for a million on a 2-core machine,
// longer while it is busy, so Do's 60 s default is too short.
const startTimeout = 10 * time.Minute

// StartBenchmark starts a run and returns it, waiting up to startTimeout
// (or ctx) for the run's targets to be stored.
func (a *Admin) StartBenchmark(ctx context.Context, req BenchmarkRequest) (*Run, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	b := *a
	if b.HTTP == nil {
		b.HTTP = &http.Client{} // bounded by ctx
	}
	var r Run
	if err := b.Do(ctx, http.MethodPost, "/admin/benchmarks", req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Benchmark fetches a run.
func (a *Admin) Benchmark(ctx context.Context, id string) (*Run, error) {
	var r Run
	if err := a.Do(ctx, http.MethodGet, "/admin/benchmarks/"+id, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

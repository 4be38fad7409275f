package adapters

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/lib/webhooksig"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

// BenchmarkWebhookCall measures the CPU one webhook call costs the client:
// the adapter (Webhook.Send: payload, signature, breaker, fasthttp) against
// net/http's client (a Transport with the same connection limits; the
// baseline, same payload, headers and signature), both against one net/http endpoint
// in another process, 64 calls in flight. Reported: client and endpoint
// CPU µs per call, calls/s.
//
//	go test -run '^$' -bench WebhookCall -benchtime 20000x -count 3 ./internal/adapters/
func BenchmarkWebhookCall(b *testing.B) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serverProcessEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("read the endpoint's address: %v", err)
	}
	url := "http://" + strings.TrimSpace(addr) + "/hook"
	key, err := webhooksig.Decode(mustSecret(b))
	if err != nil {
		b.Fatal(err)
	}
	keys := staticKeys{[][]byte{key}}

	w, _ := testWebhook(b, func(o *WebhookOptions) {
		o.AttemptTimeout, o.MaxElapsed, o.MaxConnsPerHost, o.Keys = 5*time.Second, 10*time.Second, 64, keys
	})
	baseline := &http.Client{Transport: &http.Transport{
		MaxIdleConns: 4096, MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64, IdleConnTimeout: 90 * time.Second,
	}}
	send := map[string]func(ctx context.Context, d *notiflowv1.NotificationDue) error{
		"adapter": func(ctx context.Context, d *notiflowv1.NotificationDue) error {
			o, err := w.Send(ctx, d, "hello")
			if err == nil && o.Status != notiflowv1.Status_STATUS_DELIVERED {
				err = fmt.Errorf("%+v", o)
			}
			return err
		},
		"net-http-baseline": func(ctx context.Context, d *notiflowv1.NotificationDue) error {
			payload := []byte(`{"notification_id":"` + d.NotificationId + `","recipient_id":"r","template_id":"","body":"hello","occurrence_at":"1970-01-01T00:00:00Z","sequence":1}`)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.WebhookUrl, bytes.NewReader(payload))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", d.NotificationId)
			webhooksig.SetHeaders(req.Header, keys.k, d.NotificationId, time.Now(), payload)
			req.Header.Set("User-Agent", userAgent)
			resp, err := baseline.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.CopyN(io.Discard, resp.Body, maxResponseBody)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("HTTP %d", resp.StatusCode)
			}
			return nil
		},
	}
	for _, name := range []string{"net-http-baseline", "adapter"} {
		b.Run(name, func(b *testing.B) {
			var next atomic.Int64
			var wg sync.WaitGroup
			ctx := context.Background()
			c0, s0, t0 := testkit.ProcessCPUSeconds(os.Getpid()), testkit.ProcessCPUSeconds(cmd.Process.Pid), time.Now()
			b.ResetTimer()
			for range 64 {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						d := due(strconv.FormatInt(i, 10), url)
						if err := send[name](ctx, d); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			el := time.Since(t0).Seconds()
			c1, s1 := testkit.ProcessCPUSeconds(os.Getpid()), testkit.ProcessCPUSeconds(cmd.Process.Pid)
			b.ReportMetric((c1-c0)*1e6/float64(b.N), "client_cpu_us/call")
			b.ReportMetric((s1-s0)*1e6/float64(b.N), "endpoint_cpu_us/call")
			b.ReportMetric(float64(b.N)/el, "calls/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// staticKeys signs every webhook with the same keys.
type staticKeys struct{ k [][]byte }

func (s staticKeys) Keys(context.Context, *notiflowv1.NotificationDue) ([][]byte, error) {
	return s.k, nil
}

func mustSecret(tb testing.TB) string {
	tb.Helper()
	s, err := webhooksig.Generate()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

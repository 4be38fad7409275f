package harness_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/notiflow/notiflow/bench/harness"
	"github.com/notiflow/notiflow/bench/receiver"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/lib/webhooksig"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunTests(m)) }

// TestStartReceiver runs notiflow-bench's receive command as the webhook
// benchmark does, calls it over HTTP as the dispatcher would (one signed
// call, one signed with another secret), reads its counters through the
// harness and stops it.
func TestStartReceiver(t *testing.T) {
	t.Parallel()
	bin := testkit.Binary(t, "../cmd/notiflow-bench")
	secret, err := webhooksig.Generate()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	proc, err := harness.StartReceiver(ctx, bin, filepath.Join(t.TempDir(), "receiver.log"), time.Millisecond, secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Stop(10 * time.Second) })
	if proc.Pid() <= 0 {
		t.Fatalf("pid %d", proc.Pid())
	}
	post := func(key, secret string) int {
		body := []byte(`{"notification_id":"` + key + `"}`)
		req, err := http.NewRequest(http.MethodPost, proc.URL(), bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", key)
		k, err := webhooksig.Decode(secret)
		if err != nil {
			t.Fatal(err)
		}
		webhooksig.SetHeaders(req.Header, [][]byte{k}, key, time.Now(), body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("n-1", secret); code != http.StatusOK {
		t.Fatalf("signed call: %d, want 200", code)
	}
	other, err := webhooksig.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if code := post("n-2", other); code != http.StatusUnauthorized {
		t.Fatalf("call signed with another secret: %d, want 401", code)
	}
	s, err := proc.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Calls != 2 || s.Distinct != 1 || s.BadSignatures != 1 || s.Duplicates != 0 || s.MissingIdempotencyKey != 0 {
		t.Fatalf("stats = %+v", s)
	}
	if testkit.ProcessCPUSeconds(proc.Pid()) < 0 {
		t.Fatalf("CPU of the receiver's pid %d not readable", proc.Pid())
	}
	proc.Stop(10 * time.Second)
	if _, err := proc.Stats(ctx); err == nil {
		t.Fatal("the receiver still answers after Stop")
	}
}

// TestStartReceiverRefusesBadSecret: a receiver that cannot verify exits,
// and StartReceiver says so.
func TestStartReceiverRefusesBadSecret(t *testing.T) {
	t.Parallel()
	bin := testkit.Binary(t, "../cmd/notiflow-bench")
	_, err := harness.StartReceiver(context.Background(), bin, filepath.Join(t.TempDir(), "receiver.log"), receiver.DefaultDelay, "hunter2")
	if err == nil {
		t.Fatal("StartReceiver succeeded with a secret that is not whsec_")
	}
}

package service

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
)

// TestPprofBehindTheToken: with NOTIFLOW_PPROF the sink serves the
// runtime's profiles on its read API's port, only to the API's bearer
// token.
func TestPprofBehindTheToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	cfg := e.config(t)
	cfg.Pprof = true
	start(t, cfg)
	fetch := func(auth string) (int, string, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+cfg.HTTPAddr+"/debug/pprof/", nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		code, body, err := fetch(testToken)
		if err != nil {
			return err
		}
		if code != http.StatusOK || !strings.Contains(body, "goroutine") {
			return testkit.Errorf("with the token: %d %.80q, want 200 with the profile index", code, body)
		}
		return nil
	})
	if code, _, err := fetch(""); err != nil || code != http.StatusUnauthorized {
		t.Errorf("no token: %d (%v), want 401", code, err)
	}
}

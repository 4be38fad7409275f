package service

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPprofBehindTheToken: with NOTIFLOW_PPROF the scheduler serves the
// runtime's profiles on its API port, and only to the API's bearer token;
// without it there is no such route.
func TestPprofBehindTheToken(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		cfg := testConfig(t)
		cfg.Pprof = on
		_, base, _ := startService(t, cfg)
		c := http.Client{Timeout: 10 * time.Second}
		fetch := func(auth string) (int, string) {
			t.Helper()
			req, _ := http.NewRequest(http.MethodGet, base+"/debug/pprof/", nil)
			if auth != "" {
				req.Header.Set("Authorization", "Bearer "+auth)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if !on {
			if code, _ := fetch(token); code != http.StatusNotFound {
				t.Errorf("pprof off: GET /debug/pprof/ = %d, want 404", code)
			}
			continue
		}
		if code, _ := fetch(""); code != http.StatusUnauthorized {
			t.Errorf("pprof on, no token: %d, want 401", code)
		}
		if code, _ := fetch("wrong"); code != http.StatusUnauthorized {
			t.Errorf("pprof on, wrong token: %d, want 401", code)
		}
		if code, body := fetch(token); code != http.StatusOK || !strings.Contains(body, "goroutine") {
			t.Errorf("pprof on, token: %d %.80q, want 200 with the profile index", code, body)
		}
	}
}

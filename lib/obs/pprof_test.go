package obs

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMountPprof serves the profiles as they are, or each through wrap.
func TestMountPprof(t *testing.T) {
	get := func(t *testing.T, url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	open := http.NewServeMux()
	MountPprof(open, nil)
	s := httptest.NewServer(open)
	defer s.Close()
	if code, body := get(t, s.URL+"/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("index: %d %.80q", code, body)
	}
	if code, _ := get(t, s.URL+"/debug/pprof/heap"); code != http.StatusOK {
		t.Errorf("heap profile: %d", code)
	}

	wrapped := 0
	guarded := http.NewServeMux()
	MountPprof(guarded, func(http.Handler) http.Handler {
		wrapped++
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusUnauthorized) })
	})
	g := httptest.NewServer(guarded)
	defer g.Close()
	if wrapped != len(PprofPatterns) {
		t.Errorf("wrap called %d times, want once per route (%d)", wrapped, len(PprofPatterns))
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=1"} {
		if code, _ := get(t, g.URL+path); code != http.StatusUnauthorized {
			t.Errorf("%s through wrap: %d, want 401", path, code)
		}
	}
}

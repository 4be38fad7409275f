package obs

import (
	"net/http"
	"net/http/pprof"
)

// PprofPatterns are the routes MountPprof registers: the index and the
// named profiles (heap, allocs, goroutine, block, mutex, ...) under it, a
// CPU profile (?seconds=N, default 30) and an execution trace.
var PprofPatterns = []string{"GET /debug/pprof/", "GET /debug/pprof/profile", "GET /debug/pprof/trace"}

// MountPprof serves the Go runtime's profiles on mux, each through wrap
// (the bearer check of a server that also serves an API; nil: served as
// is). Services mount them only when NOTIFLOW_PPROF is true.
func MountPprof(mux *http.ServeMux, wrap func(http.Handler) http.Handler) {
	if wrap == nil {
		wrap = func(h http.Handler) http.Handler { return h }
	}
	for pattern, h := range map[string]http.HandlerFunc{
		PprofPatterns[0]: pprof.Index, PprofPatterns[1]: pprof.Profile, PprofPatterns[2]: pprof.Trace,
	} {
		mux.Handle(pattern, wrap(h))
	}
}

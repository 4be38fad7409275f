package harness

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/httpapi"
	"github.com/notiflow/notiflow/lib/obs"
)

// serveProfiles serves the Go runtime's profiles the way the services do
// with NOTIFLOW_PPROF=true (behind the API's bearer token) on a real HTTP
// server, and returns its address.
func serveProfiles(t *testing.T, token string) string {
	t.Helper()
	mux := http.NewServeMux()
	obs.MountPprof(mux, httpapi.NewGuard(token, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), "pprof").Wrap)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// CPUProfiles writes one CPU profile per process, named after it; a
// process that refuses (a wrong token) is named in the error while the
// others' profiles are still written.
func TestCPUProfilesWritesOneProfilePerProcess(t *testing.T) {
	t.Parallel()
	good, other := serveProfiles(t, "secret"), serveProfiles(t, "another")
	dir := t.TempDir()
	procs := []*Proc{{Name: "scheduler", Addr: good}, {Name: "sink", Addr: other}}
	files, err := CPUProfiles(context.Background(), procs, "secret", time.Second, dir)
	if err == nil || !strings.Contains(err.Error(), "profile sink") || !strings.Contains(err.Error(), "401") {
		t.Fatalf("err = %v, want the sink's profile refused with 401", err)
	}
	want := filepath.Join(dir, "scheduler.pprof")
	if len(files) != 1 || files[0] != want {
		t.Fatalf("files = %v, want [%s]", files, want)
	}
	b, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) { // a profile is gzipped protobuf
		t.Fatalf("%s is not a profile: %q", want, b[:min(len(b), 64)])
	}
	if _, err := os.Stat(filepath.Join(dir, "sink.pprof")); !os.IsNotExist(err) {
		t.Fatalf("a refused profile left a file (stat: %v)", err)
	}
}

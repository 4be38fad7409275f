package adapters

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
)

// serverProcessEnv makes the test binary a plain webhook endpoint
// (BenchmarkWebhookCall's receiver, in a process of its own so that its
// CPU is not the client's): it listens on loopback, prints its address
// and answers every POST 200.
const serverProcessEnv = "NOTIFLOW_BENCH_WEBHOOK_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(serverProcessEnv) != "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(ln.Addr().String())
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusOK)
		}))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

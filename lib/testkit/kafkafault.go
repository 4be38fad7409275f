package testkit

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// ProduceFaults is a kafka.RoundTripper for a kafka.Writer's Transport: it
// refuses the first produce requests it is given, as a broker that is down
// does, and passes every other request to the real transport. It is safe
// for concurrent use.
type ProduceFaults struct {
	next     kafka.RoundTripper
	left     atomic.Int64
	produces atomic.Int64
}

// FailProduces returns a transport that refuses the first n produce
// requests (kafka-go's Writer retries a refused connection up to its
// MaxAttempts per batch, so n = MaxAttempts fails one whole batch) and
// sends everything else through kafka.DefaultTransport.
func FailProduces(n int) *ProduceFaults {
	f := &ProduceFaults{next: kafka.DefaultTransport}
	f.left.Store(int64(n))
	return f
}

// RoundTrip implements kafka.RoundTripper.
func (f *ProduceFaults) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	if req.ApiKey() == protocol.Produce {
		f.produces.Add(1)
		if f.left.Add(-1) >= 0 {
			return nil, fmt.Errorf("injected produce fault: dial %s: %w", addr, syscall.ECONNREFUSED)
		}
	}
	return f.next.RoundTrip(ctx, addr, req)
}

// Produces returns how many produce requests the transport was given,
// refused ones included.
func (f *ProduceFaults) Produces() int { return int(f.produces.Load()) }

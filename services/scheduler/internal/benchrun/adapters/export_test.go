package adapters

import (
	"context"
	"net"
)

// SetDial makes l open its broker connections with dial.
func SetDial(l *Lag, dial func(ctx context.Context, network, addr string) (net.Conn, error)) {
	l.dial = dial
}

package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/notiflow/notiflow/bench/receiver"
)

// cmdReceive serves the webhook benchmark's receiver (bench/receiver) on
// -addr until SIGINT or SIGTERM; its secret is in receiver.SecretEnv. The
// benchmark starts it as a process of its own (harness.StartReceiver).
func cmdReceive(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("receive", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "address to listen on")
	delay := fs.Duration("delay", receiver.DefaultDelay, "how long each call waits for its answer (the provider latency)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	r, err := receiver.New(os.Getenv(receiver.SecretEnv), *delay)
	if err != nil {
		return fmt.Errorf("%w (from %s)", err, receiver.SecretEnv)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("receiver: listen on %s: %w", *addr, err)
	}
	srv := r.Server()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Printf("webhook receiver on http://%s, answering after %s\n", ln.Addr(), *delay)
	select {
	case err := <-served:
		return fmt.Errorf("receiver: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.ShutdownWithContext(sctx)
	s := r.Stats()
	fmt.Printf("webhook receiver stopping: calls %d, distinct %d, duplicates %d, missing Idempotency-Key %d, bad signatures %d\n",
		s.Calls, s.Distinct, s.Duplicates, s.MissingIdempotencyKey, s.BadSignatures)
	if err != nil {
		return fmt.Errorf("receiver: shut down: %w", err)
	}
	return nil
}

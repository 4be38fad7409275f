// Command healthcheck is the container health probe of the notiflow images.
// The images are distroless (no shell, no curl), so docker compose's
// healthcheck runs this static binary instead:
//
//	healthcheck http://127.0.0.1:8080/readyz
//
// It exits 0 when the URL answers 2xx within the timeout (-timeout, default
// 2s) and 1 otherwise, printing the reason to stderr. It uses only the
// standard library so the Dockerfile builds it from this one file, outside
// any module.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	timeout := flag.Duration("timeout", 2*time.Second, "give up after this long")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: healthcheck [-timeout 2s] URL")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	err := check(ctx, http.DefaultClient, flag.Arg(0))
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "healthcheck: %v\n", err)
		os.Exit(1)
	}
}

// check fetches url and returns nil when it answers with a 2xx status
// before ctx ends.
func check(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return nil
}

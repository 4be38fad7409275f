package main

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestRefusesParamsThatCannotFitARecord starts the process with params of
// up to 1 MiB while the producer sends records of at most 1,000,000 bytes:
// it stops at once, naming the variable, before touching any service.
func TestRefusesParamsThatCannotFitARecord(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Services nobody listens on: the check must stop the process first.
	cmd := command(t, "NOTIFLOW_INSECURE_NO_AUTH=true", "NOTIFLOW_MAX_PARAMS_BYTES=1048576", "NOTIFLOW_KAFKA_MAX_MESSAGE_BYTES=1000000",
		"NOTIFLOW_MYSQL_DSN=u:p@tcp(127.0.0.1:1)/none?parseTime=true", "NOTIFLOW_REDIS_ADDR=127.0.0.1:1", "NOTIFLOW_KAFKA_BROKERS=127.0.0.1:1")
	run := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	run.Env = cmd.Env
	out, err := run.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("exit: %v, want status 2; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "NOTIFLOW_MAX_PARAMS_BYTES:") {
		t.Fatalf("output does not name NOTIFLOW_MAX_PARAMS_BYTES:\n%s", out)
	}
}

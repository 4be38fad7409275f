package harness

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// scripts/deps.sh's log_has_after, which tells when a restarted Kafka has
// started, finds the line after the offset even when megabytes of log
// follow it (a broker deleting many topics' logs as it starts writes
// that much): piped into a grep -q that stops at the match, tail died of
// SIGPIPE and, under pipefail, the check failed until its timeout. It
// does not find a line written before the offset.
func TestDepsLogHasAfter(t *testing.T) {
	t.Parallel()
	script, err := filepath.Abs("../../scripts/deps.sh")
	if err != nil {
		t.Fatal(err)
	}
	before := strings.Repeat("[earlier run] INFO something\n", 100) + "[earlier run] INFO Kafka Server started\n"
	var after strings.Builder
	after.WriteString("[this run] INFO Kafka Server started\n")
	for i := 0; after.Len() < 4<<20; i++ {
		after.WriteString("[this run] INFO Deleted log for partition t-" + strconv.Itoa(i) + " in /data/t-" + strconv.Itoa(i) + "-delete.\n")
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "server.log")
	if err := os.WriteFile(log, []byte(before+after.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	has := func(offset int, text string) bool {
		t.Helper()
		cmd := exec.Command("bash", "-c", `source "$1" && log_has_after "$2" "$3" "$4"`, "test", script, log, strconv.Itoa(offset), text)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return true
		case errors.As(err, &exit) && exit.ExitCode() == 1 && len(out) == 0:
			return false
		}
		t.Fatalf("log_has_after %d %q: %v: %s", offset, text, err, out)
		return false
	}
	if !has(len(before), "Kafka Server started") {
		t.Error("the started line after the offset, before 4 MiB of log, was not found")
	}
	if has(len(before)+len("[this run] INFO Kafka Server started\n"), "Kafka Server started") {
		t.Error("a started line before the offset was found")
	}
}

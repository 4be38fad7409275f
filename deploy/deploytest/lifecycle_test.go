package deploytest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// minPreStopSleep is the least time a terminating pod keeps serving after
// the API marks it, while endpoints and load balancers stop sending to it.
const minPreStopSleep = 3 * time.Second

// checkPreStop: every service container sleeps in preStop before SIGTERM
// closes its listener, with the kubelet's sleep action (the distroless
// image has no shell to exec a sleep), and the grace period covers the
// sleep, then the drain and the HTTP server's shutdown (each bounded by
// NOTIFLOW_SHUTDOWN_TIMEOUT).
func checkPreStop(t *testing.T, where string, pod corev1.PodSpec, c corev1.Container, shutdown time.Duration) {
	t.Helper()
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		t.Errorf("%s: container %s has no preStop: the listener closes while endpoints still send to the pod", where, c.Name)
		return
	}
	ps := c.Lifecycle.PreStop
	if ps.Exec != nil {
		t.Errorf("%s: container %s: preStop exec %v: the image (distroless) has no shell or sleep; use lifecycle.preStop.sleep", where, c.Name, ps.Exec.Command)
	}
	if ps.Sleep == nil {
		t.Errorf("%s: container %s: preStop has no sleep action", where, c.Name)
		return
	}
	sleep := time.Duration(ps.Sleep.Seconds) * time.Second
	if sleep < minPreStopSleep {
		t.Errorf("%s: container %s: preStop sleep %s, want at least %s for endpoints to drain", where, c.Name, sleep, minPreStopSleep)
	}
	if pod.TerminationGracePeriodSeconds == nil {
		return // reported by checkDeployment
	}
	if grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second; grace <= sleep+2*shutdown {
		t.Errorf("%s: terminationGracePeriodSeconds %s must exceed the preStop sleep (%s) + 2 x NOTIFLOW_SHUTDOWN_TIMEOUT (%s): the grace period starts before preStop",
			where, grace, sleep, shutdown)
	}
}

// TestImageHasNoShell holds the reason checkPreStop refuses an exec
// preStop: the Dockerfile's runtime stage is a distroless static image.
func TestImageHasNoShell(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(string(b), -1)
	if len(froms) == 0 {
		t.Fatal("Dockerfile: no FROM")
	}
	if last := froms[len(froms)-1][1]; !strings.HasPrefix(last, "gcr.io/distroless/static") {
		t.Errorf("Dockerfile: runtime image %s is not distroless static; if it has a shell now, revisit the preStop sleep action", last)
	}
}

// Go's GOMEMLIMIT syntax: a byte count with an optional IEC suffix.
var goMemLimitPattern = regexp.MustCompile(`^([0-9]+)(B|KiB|MiB|GiB|TiB)?$`)

// parseGoMemLimit parses a GOMEMLIMIT value as the Go runtime does.
func parseGoMemLimit(s string) (int64, error) {
	m := goMemLimitPattern.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("GOMEMLIMIT=%q: want a byte count with an optional B, KiB, MiB, GiB or TiB suffix", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("GOMEMLIMIT=%q: %w", s, err)
	}
	shift := map[string]uint{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[m[2]]
	return n << shift, nil
}

// GOMEMLIMIT bounds, as fractions of the container's memory limit: near
// 90%, leaving headroom below the OOM kill for memory the runtime does not
// manage.
const (
	minGoMemLimitRatio = 0.85
	maxGoMemLimitRatio = 0.92
)

// checkGoMemLimit: a container with a memory limit sets GOMEMLIMIT to
// about 90% of it, as a literal (the value is what the process sees).
func checkGoMemLimit(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	limit, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		return // checkResources reports a missing limit
	}
	var env *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == "GOMEMLIMIT" {
			env = &c.Env[i]
		}
	}
	switch {
	case env == nil:
		t.Errorf("%s: container %s has a memory limit (%s) and no GOMEMLIMIT: the Go runtime does not see the limit", where, c.Name, limit.String())
		return
	case env.ValueFrom != nil:
		t.Errorf("%s: container %s: GOMEMLIMIT from valueFrom; set a literal near 90%% of the limit (the downward API gives 100%%)", where, c.Name)
		return
	}
	got, err := parseGoMemLimit(env.Value)
	if err != nil {
		t.Errorf("%s: container %s: %v", where, c.Name, err)
		return
	}
	ratio := float64(got) / float64(limit.Value())
	if ratio < minGoMemLimitRatio || ratio > maxGoMemLimitRatio {
		t.Errorf("%s: container %s: GOMEMLIMIT=%s is %.1f%% of limits.memory %s, want %.0f-%.0f%% (~90%%)",
			where, c.Name, env.Value, 100*ratio, limit.String(), 100*minGoMemLimitRatio, 100*maxGoMemLimitRatio)
	}
}

func TestParseGoMemLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give    string
		want    int64
		wantErr bool
	}{
		{give: "460MiB", want: 460 << 20},
		{give: "1GiB", want: 1 << 30},
		{give: "123456", want: 123456},
		{give: "100B", want: 100},
		{give: "512Mi", wantErr: true},
		{give: "500MB", wantErr: true},
		{give: "", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseGoMemLimit(tt.give)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseGoMemLimit(%q) = %d, %v; want %d, error %v", tt.give, got, err, tt.want, tt.wantErr)
		}
	}
}

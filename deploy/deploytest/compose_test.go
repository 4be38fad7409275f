package deploytest

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"sigs.k8s.io/yaml"
)

// kafkaImage is the broker image of docker-compose.yml, also used by the
// Kubernetes topic-setup Job.
const kafkaImage = "apache/kafka:4.1.1"

// composeEnv is what a user puts in .env (see .env.example).
var composeEnv = map[string]string{
	"NOTIFLOW_API_TOKEN": "test-token-not-a-secret",
	"MYSQL_PASSWORD":     "test-password-not-a-secret",
}

// loadCompose loads docker-compose.yml with compose-go, as `docker compose`
// does (schema validation, interpolation, merge keys), with env as the only
// environment: neither the test's environment nor a developer's .env leaks in.
func loadCompose(tb testing.TB, env map[string]string) (*types.Project, error) {
	tb.Helper()
	root := repoRoot(tb)
	var kv []string
	for k, v := range env {
		kv = append(kv, k+"="+v)
	}
	opts, err := cli.NewProjectOptions(
		[]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root),
		cli.WithEnv(kv),
		cli.WithInterpolation(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return opts.LoadProject(ctx)
}

func composeProject(tb testing.TB) *types.Project {
	tb.Helper()
	p, err := loadCompose(tb, composeEnv)
	if err != nil {
		tb.Fatalf("load docker-compose.yml: %v", err)
	}
	return p
}

// composeServiceEnv is the service's environment with every value set.
func composeServiceEnv(tb testing.TB, s types.ServiceConfig) map[string]string {
	tb.Helper()
	env := map[string]string{}
	for k, v := range s.Environment {
		if v == nil {
			tb.Errorf("compose service %s: %s has no value (it would be taken from the host's environment)", s.Name, k)
			continue
		}
		env[k] = *v
	}
	return env
}

func TestComposeServices(t *testing.T) {
	p := composeProject(t)
	want := []string{"kafka", "kafka-topics", "mysql", "redis", "scheduler", "dispatcher", "sink", "prometheus", "grafana"}
	for _, name := range want {
		if _, ok := p.Services[name]; !ok {
			t.Errorf("docker-compose.yml: no service %s", name)
		}
	}
	for name := range p.Services {
		if !slices.Contains(want, name) {
			t.Errorf("docker-compose.yml: unexpected service %s (update this test)", name)
		}
	}
	images := map[string]string{"kafka": kafkaImage, "kafka-topics": kafkaImage, "mysql": "mysql:8.4", "redis": "redis:7"}
	for name, img := range images {
		if got := p.Services[name].Image; got != img {
			t.Errorf("compose service %s: image %q, want %q", name, got, img)
		}
	}
	// Every service that is waited on has a healthcheck, every dependency
	// exists, and the graph has no cycle.
	for name, s := range p.Services {
		for dep, cond := range s.DependsOn {
			ds, ok := p.Services[dep]
			if !ok {
				t.Errorf("compose service %s depends on unknown %s", name, dep)
				continue
			}
			if cond.Condition == types.ServiceConditionHealthy && (ds.HealthCheck == nil || ds.HealthCheck.Disable || len(ds.HealthCheck.Test) == 0) {
				t.Errorf("compose service %s waits for %s to be healthy, which has no healthcheck", name, dep)
			}
		}
		if s.HealthCheck != nil && (s.HealthCheck.Interval == nil || s.HealthCheck.Timeout == nil || s.HealthCheck.Retries == nil) {
			t.Errorf("compose service %s: healthcheck needs interval, timeout and retries", name)
		}
	}
	if cycle := dependsOnCycle(p); cycle != nil {
		t.Errorf("depends_on cycle: %v", cycle)
	}
	// The one-shot topic service: the shipped script, the services' Kafka
	// settings, run once after the broker is healthy.
	kt := p.Services["kafka-topics"]
	if kt.DependsOn["kafka"].Condition != types.ServiceConditionHealthy {
		t.Errorf("kafka-topics must wait for kafka to be healthy")
	}
	if kt.Restart != "no" {
		t.Errorf("kafka-topics: restart %q, want \"no\" (one shot)", kt.Restart)
	}
	script := filepath.Join(repoRoot(t), "deploy", "kafka", "create-topics.sh")
	mounted := false
	for _, v := range kt.Volumes {
		if v.Type == types.VolumeTypeBind && v.Source == script && v.ReadOnly && slices.Contains(kt.Entrypoint, v.Target) {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("kafka-topics: mount deploy/kafka/create-topics.sh read-only and run it as the entrypoint")
	}
	// Kafka: KRaft, one node, no automatic topic creation.
	kenv := composeServiceEnv(t, p.Services["kafka"])
	for k, v := range map[string]string{"KAFKA_PROCESS_ROLES": "broker,controller", "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
		"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1", "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER"} {
		if kenv[k] != v {
			t.Errorf("kafka: %s=%q, want %q", k, kenv[k], v)
		}
	}
	// Every bind mount source exists in the repository.
	for name, s := range p.Services {
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("compose service %s: bind mount source: %v", name, err)
			}
		}
	}
}

// TestComposeNotiflowServices checks the three services against their own
// config code and the Dockerfile.
func TestComposeNotiflowServices(t *testing.T) {
	p := composeProject(t)
	root := repoRoot(t)
	topicsEnv := composeServiceEnv(t, p.Services["kafka-topics"])
	for _, name := range services {
		t.Run(name, func(t *testing.T) {
			s, ok := p.Services[name]
			if !ok {
				t.Fatalf("no compose service %s", name)
			}
			// Built from the Dockerfile with the repository root as context.
			if s.Build == nil {
				t.Fatalf("%s: no build section", name)
			}
			if s.Build.Context != root {
				t.Errorf("%s: build context %q, want the repository root %q (the go.mod replaces ../../lib)", name, s.Build.Context, root)
			}
			if s.Build.Dockerfile != "Dockerfile" {
				t.Errorf("%s: dockerfile %q, want the repository's Dockerfile", name, s.Build.Dockerfile)
			}
			// The Dockerfile's build arguments name the service and its
			// default HTTP port.
			for arg, want := range buildArgs(t, name) {
				if v := s.Build.Args[arg]; v == nil || *v != want {
					got := "unset"
					if v != nil {
						got = strconv.Quote(*v)
					}
					t.Errorf("%s: build arg %s is %s, want %q", name, arg, got, want)
				}
			}
			if repo, _, _ := strings.Cut(s.Image, ":"); repo != "notiflow/"+name {
				t.Errorf("%s: image %q, want notiflow/%s:<tag>", name, s.Image, name)
			}
			// Hardening.
			if !s.ReadOnly {
				t.Errorf("%s: read_only must be true", name)
			}
			if !slices.Contains(s.CapDrop, "ALL") {
				t.Errorf("%s: cap_drop must contain ALL", name)
			}
			if !slices.Contains(s.SecurityOpt, "no-new-privileges:true") {
				t.Errorf("%s: security_opt must contain no-new-privileges:true", name)
			}
			// Environment: only variables the service reads, valid for it.
			env := composeServiceEnv(t, s)
			for k := range env {
				if !strings.HasPrefix(k, "NOTIFLOW_") && !slices.Contains(allowedNonNotiflowEnv, k) {
					t.Errorf("%s: variable %s is neither NOTIFLOW_* nor a Go runtime setting", name, k)
				}
			}
			res := configOf(t, name).checkEnv(t, "docker-compose.yml "+name, env)
			port := res.httpPort(t)
			// The topic service creates what this service uses.
			for _, k := range []string{"NOTIFLOW_KAFKA_BROKERS", "NOTIFLOW_KAFKA_PARTITIONS", "NOTIFLOW_KAFKA_REPLICATION_FACTOR",
				"NOTIFLOW_TOPIC_DUE", "NOTIFLOW_TOPIC_DISPATCHED", "NOTIFLOW_TOPIC_DLQ"} {
				if topicsEnv[k] != res.value(t, k) {
					t.Errorf("%s uses %s=%q, kafka-topics creates with %q", name, k, res.value(t, k), topicsEnv[k])
				}
			}
			// Healthcheck: the image's probe on the port the service listens on.
			hc := s.HealthCheck
			wantTest := []string{"CMD", "/usr/local/bin/healthcheck", fmt.Sprintf("http://127.0.0.1:%d/readyz", port)}
			if hc == nil || !slices.Equal([]string(hc.Test), wantTest) {
				var got []string
				if hc != nil {
					got = hc.Test
				}
				t.Errorf("%s: healthcheck test %q, want %q", name, got, wantTest)
			}
			// Ports: published only on loopback, to the service's port; the
			// dispatcher publishes nothing and has no container_name so that
			// --scale works.
			for _, pc := range s.Ports {
				if pc.Target != uint32(port) {
					t.Errorf("%s: publishes container port %d, the service listens on %d", name, pc.Target, port)
				}
				if pc.HostIP != "127.0.0.1" {
					t.Errorf("%s: port %d published on %q, want 127.0.0.1", name, pc.Target, pc.HostIP)
				}
			}
			if name == "dispatcher" {
				if len(s.Ports) != 0 || s.ContainerName != "" {
					t.Errorf("dispatcher: no published ports and no container_name, or `--scale dispatcher=N` fails")
				}
				if s.Scale != nil || s.Deploy != nil {
					t.Errorf("dispatcher: leave the replica count to --scale")
				}
			} else if len(s.Ports) != 1 {
				t.Errorf("%s: want its HTTP port published on 127.0.0.1", name)
			}
			// Shutdown: compose's SIGKILL later than the drain plus the HTTP
			// shutdown (compose's default is 10s).
			shutdown := res.duration(t, "NOTIFLOW_SHUTDOWN_TIMEOUT")
			if s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) <= 2*shutdown {
				t.Errorf("%s: stop_grace_period must exceed 2 x NOTIFLOW_SHUTDOWN_TIMEOUT (%s)", name, shutdown)
			}
			// Start order: topics created, and every dependency the
			// configuration names (host:port in a value) healthy first.
			if s.DependsOn["kafka-topics"].Condition != types.ServiceConditionCompletedSuccessfully {
				t.Errorf("%s: depends_on kafka-topics must be service_completed_successfully", name)
			}
			for dep := range p.Services {
				if dep == name || dep == "kafka" { // kafka: through kafka-topics
					continue
				}
				hostRef := regexp.MustCompile(`(^|[@(/,])` + regexp.QuoteMeta(dep) + `:\d+`)
				for k, v := range env {
					if hostRef.MatchString(v) && s.DependsOn[dep].Condition != types.ServiceConditionHealthy {
						t.Errorf("%s: %s names %s, so depend on it with condition service_healthy", name, k, dep)
					}
				}
			}
			// Prometheus scrapes it on its port.
			if !prometheusScrapes(t, root, name, port) {
				t.Errorf("deploy/prometheus/prometheus.yml: no job scraping %s on port %d", name, port)
			}
		})
	}
}

// TestComposeSecrets: credentials come from the user's environment (.env),
// never from a literal in the file, and loading fails without them.
func TestComposeSecrets(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Environment map[string]any `json:"environment"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("parse docker-compose.yml: %v", err)
	}
	required := regexp.MustCompile(`\$\{([A-Z0-9_]+):\?[^}]*\}`)
	for name, s := range doc.Services {
		for k, v := range s.Environment {
			sv := fmt.Sprint(v)
			// MYSQL_RANDOM_ROOT_PASSWORD is a flag: MySQL generates the password.
			if secretLike(k) && k != "MYSQL_RANDOM_ROOT_PASSWORD" && !required.MatchString(sv) {
				t.Errorf("compose service %s: %s=%q: take credentials from a required variable, ${VAR:?message}", name, k, sv)
			}
		}
	}
	// Every required variable is documented in .env.example.
	example, err := os.ReadFile(filepath.Join(repoRoot(t), ".env.example"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range required.FindAllStringSubmatch(string(raw), -1) {
		if !regexp.MustCompile(`(?m)^` + m[1] + `=`).Match(example) {
			t.Errorf(".env.example does not list %s", m[1])
		}
		// Without it, loading fails and names it.
		env := map[string]string{}
		for k, v := range composeEnv {
			if k != m[1] {
				env[k] = v
			}
		}
		if _, err := loadCompose(t, env); err == nil || !strings.Contains(err.Error(), m[1]) {
			t.Errorf("loading without %s: error %v, want one naming it", m[1], err)
		}
	}
}

// prometheusScrapes reports whether deploy/prometheus/prometheus.yml has a
// job finding service on port (DNS service discovery, so every replica).
func prometheusScrapes(tb testing.TB, root, service string, port int) bool {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(root, "deploy", "prometheus", "prometheus.yml"))
	if err != nil {
		tb.Fatal(err)
	}
	var cfg struct {
		Global        map[string]any `json:"global"`
		ScrapeConfigs []struct {
			JobName      string `json:"job_name"`
			DNSSDConfigs []struct {
				Names           []string `json:"names"`
				Type            string   `json:"type"`
				Port            int      `json:"port"`
				RefreshInterval string   `json:"refresh_interval"`
			} `json:"dns_sd_configs"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		tb.Fatalf("deploy/prometheus/prometheus.yml: %v", err)
	}
	for _, sc := range cfg.ScrapeConfigs {
		for _, d := range sc.DNSSDConfigs {
			if slices.Contains(d.Names, service) && d.Port == port && d.Type == "A" {
				return true
			}
		}
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				if h, p, err := net.SplitHostPort(target); err == nil && h == service && p == strconv.Itoa(port) {
					return true
				}
			}
		}
	}
	return false
}

// dependsOnCycle returns a cycle in depends_on, or nil.
func dependsOnCycle(p *types.Project) []string {
	const (
		unseen = iota
		active
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(string) []string
	visit = func(n string) []string {
		switch state[n] {
		case active:
			return append(append([]string{}, stack...), n)
		case done:
			return nil
		}
		state[n] = active
		stack = append(stack, n)
		for dep := range p.Services[n].DependsOn {
			if c := visit(dep); c != nil {
				return c
			}
		}
		stack = stack[:len(stack)-1]
		state[n] = done
		return nil
	}
	for name := range p.Services {
		if c := visit(name); c != nil {
			return c
		}
	}
	return nil
}

// TestComposeObservability: Grafana's provisioning points at the compose
// Prometheus and at the mounted dashboard folder; Kafka's CLUSTER_ID is a
// valid Kafka UUID (base64url of 16 bytes).
func TestComposeObservability(t *testing.T) {
	p := composeProject(t)
	root := repoRoot(t)
	var ds struct {
		APIVersion  int `json:"apiVersion"`
		Datasources []struct {
			Name      string         `json:"name"`
			UID       string         `json:"uid"`
			Type      string         `json:"type"`
			Access    string         `json:"access"`
			URL       string         `json:"url"`
			IsDefault bool           `json:"isDefault"`
			Editable  bool           `json:"editable"`
			JSONData  map[string]any `json:"jsonData"`
		} `json:"datasources"`
	}
	readStrict(t, filepath.Join(root, "deploy", "grafana", "provisioning", "datasources", "prometheus.yml"), &ds)
	promPort := 0
	for _, pc := range p.Services["prometheus"].Ports {
		promPort = int(pc.Target)
	}
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != fmt.Sprintf("http://prometheus:%d", promPort) {
		t.Errorf("Grafana datasource must be the compose Prometheus at http://prometheus:%d: %+v", promPort, ds.Datasources)
	}
	var prov struct {
		APIVersion int `json:"apiVersion"`
		Providers  []struct {
			Name            string `json:"name"`
			Folder          string `json:"folder"`
			Type            string `json:"type"`
			DisableDeletion bool   `json:"disableDeletion"`
			AllowUIUpdates  bool   `json:"allowUiUpdates"`
			Options         struct {
				Path string `json:"path"`
			} `json:"options"`
		} `json:"providers"`
	}
	readStrict(t, filepath.Join(root, "deploy", "grafana", "provisioning", "dashboards", "notiflow.yml"), &prov)
	dashDir := filepath.Join(root, "deploy", "grafana", "dashboards")
	mounted := false
	for _, v := range p.Services["grafana"].Volumes {
		if v.Type == types.VolumeTypeBind && v.Source == dashDir && len(prov.Providers) == 1 && v.Target == prov.Providers[0].Options.Path {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("grafana: mount deploy/grafana/dashboards at the provider's path %+v", prov.Providers)
	}
	id := composeServiceEnv(t, p.Services["kafka"])["CLUSTER_ID"]
	if b, err := base64.RawURLEncoding.DecodeString(id); err != nil || len(b) != 16 {
		t.Errorf("kafka: CLUSTER_ID %q is not a Kafka UUID (base64url of 16 bytes)", id)
	}
	// The in-cluster scrape job parses and keeps annotated pods.
	var k8s struct {
		ScrapeConfigs []struct {
			JobName             string           `json:"job_name"`
			ScrapeInterval      string           `json:"scrape_interval"`
			KubernetesSDConfigs []map[string]any `json:"kubernetes_sd_configs"`
			RelabelConfigs      []map[string]any `json:"relabel_configs"`
		} `json:"scrape_configs"`
	}
	readStrict(t, filepath.Join(root, "deploy", "prometheus", "kubernetes-scrape.yml"), &k8s)
	if len(k8s.ScrapeConfigs) != 1 || len(k8s.ScrapeConfigs[0].RelabelConfigs) == 0 {
		t.Errorf("kubernetes-scrape.yml: want one job with relabel rules")
	}
}

func readStrict(t *testing.T, path string, out any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

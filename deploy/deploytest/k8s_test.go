package deploytest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const namespace = "notiflow"

// overlays are the deployable kustomizations under deploy/k8s/overlays.
var overlays = []string{"dev", "local", "local-keda", "prod", "prod-hpa"}

// rendered is one overlay rendered by `kubectl kustomize` and decoded
// strictly into the Kubernetes API types.
type rendered struct {
	overlay     string
	namespaces  []*corev1.Namespace
	configMaps  map[string]*corev1.ConfigMap
	secrets     []*corev1.Secret
	services    map[string]*corev1.Service
	deployments map[string]*appsv1.Deployment
	stateful    map[string]*appsv1.StatefulSet // components/deps (the local overlays)
	jobs        map[string]*batchv1.Job
	pdbs        []*policyv1.PodDisruptionBudget
	netpols     []*networkingv1.NetworkPolicy
	hpas        []*autoscalingv2.HorizontalPodAutoscaler
	scaled      []map[string]any // keda.sh/v1alpha1 ScaledObject (no typed struct here)
	podMonitors []*podMonitor    // monitoring.coreos.com/v1 PodMonitor (components/podmonitor)
	metas       []metav1.Object  // every typed object, for namespace checks
}

// kubectlKustomize renders dir. kubectl is a hard requirement of these
// tests: without it they fail, saying so.
func kubectlKustomize(tb testing.TB, dir string) []byte {
	tb.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		tb.Fatalf("kubectl is required to render deploy/k8s (kubectl kustomize) and was not found on PATH: %v", err)
	}
	cmd := exec.Command(kubectl, "kustomize", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.String())
	}
	return out
}

// splitYAML splits a multi-document YAML stream.
func splitYAML(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(b, []byte("\n---\n")) {
		d = bytes.TrimPrefix(bytes.TrimSpace(d), []byte("---\n"))
		if len(bytes.TrimSpace(d)) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

// decodeStrict decodes doc into out, failing on any field the type does not
// have.
func decodeStrict(doc []byte, out any) error {
	return yaml.UnmarshalStrict(doc, out)
}

func render(tb testing.TB, overlay string) *rendered {
	tb.Helper()
	return renderDir(tb, overlay, filepath.Join(repoRoot(tb), "deploy", "k8s", "overlays", overlay))
}

// renderDir renders the kustomization in dir, named overlay in messages.
func renderDir(tb testing.TB, overlay, dir string) *rendered {
	tb.Helper()
	r := &rendered{
		overlay:     overlay,
		configMaps:  map[string]*corev1.ConfigMap{},
		services:    map[string]*corev1.Service{},
		deployments: map[string]*appsv1.Deployment{},
		stateful:    map[string]*appsv1.StatefulSet{},
		jobs:        map[string]*batchv1.Job{},
	}
	for i, doc := range splitYAML(kubectlKustomize(tb, dir)) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			tb.Fatalf("%s: document %d: %v", overlay, i, err)
		}
		gvk := tm.APIVersion + "/" + tm.Kind
		var obj metav1.Object
		var err error
		switch gvk {
		case "v1/Namespace":
			o := &corev1.Namespace{}
			err, obj = decodeStrict(doc, o), o
			r.namespaces = append(r.namespaces, o)
		case "v1/ConfigMap":
			o := &corev1.ConfigMap{}
			err, obj = decodeStrict(doc, o), o
			r.configMaps[o.Name] = o
		case "v1/Secret":
			o := &corev1.Secret{}
			err, obj = decodeStrict(doc, o), o
			r.secrets = append(r.secrets, o)
		case "v1/Service":
			o := &corev1.Service{}
			err, obj = decodeStrict(doc, o), o
			r.services[o.Name] = o
		case "apps/v1/Deployment":
			o := &appsv1.Deployment{}
			err, obj = decodeStrict(doc, o), o
			r.deployments[o.Name] = o
		case "apps/v1/StatefulSet":
			o := &appsv1.StatefulSet{}
			err, obj = decodeStrict(doc, o), o
			r.stateful[o.Name] = o
		case "batch/v1/Job":
			o := &batchv1.Job{}
			err, obj = decodeStrict(doc, o), o
			r.jobs[o.Name] = o
		case "policy/v1/PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			err, obj = decodeStrict(doc, o), o
			r.pdbs = append(r.pdbs, o)
		case "networking.k8s.io/v1/NetworkPolicy":
			o := &networkingv1.NetworkPolicy{}
			err, obj = decodeStrict(doc, o), o
			r.netpols = append(r.netpols, o)
		case "autoscaling/v2/HorizontalPodAutoscaler":
			o := &autoscalingv2.HorizontalPodAutoscaler{}
			err, obj = decodeStrict(doc, o), o
			r.hpas = append(r.hpas, o)
		case "keda.sh/v1alpha1/ScaledObject":
			var m map[string]any
			err = decodeStrict(doc, &m)
			if err == nil {
				err = checkScaledObjectFields(m)
			}
			r.scaled = append(r.scaled, m)
		case "monitoring.coreos.com/v1/PodMonitor":
			o := &podMonitor{}
			err, obj = decodeStrict(doc, o), o
			r.podMonitors = append(r.podMonitors, o)
		default:
			tb.Fatalf("%s: document %d: kind %s is not one these checks know; add a typed decode for it", overlay, i, gvk)
		}
		if err != nil {
			tb.Fatalf("%s: document %d (%s): strict decode: %v\n%s", overlay, i, gvk, err, doc)
		}
		if obj != nil {
			r.metas = append(r.metas, obj)
		}
	}
	return r
}

// The ScaledObject has no Go type here: its fields are checked against the
// KEDA 2.x schema by hand (unknown keys fail, as in a strict decode).
var (
	scaledObjectKeys = []string{"apiVersion", "kind", "metadata", "spec"}
	scaledSpecKeys   = []string{"scaleTargetRef", "pollingInterval", "cooldownPeriod", "initialCooldownPeriod",
		"idleReplicaCount", "minReplicaCount", "maxReplicaCount", "fallback", "advanced", "triggers"}
	scaledTargetKeys  = []string{"apiVersion", "kind", "name", "envSourceContainerName"}
	scaledTriggerKeys = []string{"type", "name", "metadata", "authenticationRef", "metricType", "useCachedMetrics"}
	kedaKafkaKeys     = []string{"bootstrapServers", "consumerGroup", "topic", "lagThreshold", "activationLagThreshold",
		"offsetResetPolicy", "allowIdleConsumers", "excludePersistentLag", "scaleToZeroOnInvalidOffset",
		"limitToPartitionsWithLag", "ensureEvenDistributionOfPartitions", "partitionLimitation", "version",
		"sasl", "tls", "unsafeSsl"}
)

func checkKeys(where string, m map[string]any, allowed []string) error {
	var errs []error
	for k := range m {
		if !slices.Contains(allowed, k) {
			errs = append(errs, fmt.Errorf("%s: unknown field %q", where, k))
		}
	}
	return errors.Join(errs...)
}

func checkScaledObjectFields(m map[string]any) error {
	errs := []error{checkKeys("ScaledObject", m, scaledObjectKeys)}
	spec, _ := m["spec"].(map[string]any)
	if spec == nil {
		return errors.New("ScaledObject: no spec")
	}
	errs = append(errs, checkKeys("spec", spec, scaledSpecKeys))
	target, _ := spec["scaleTargetRef"].(map[string]any)
	if target == nil {
		errs = append(errs, errors.New("spec.scaleTargetRef missing"))
	} else {
		errs = append(errs, checkKeys("spec.scaleTargetRef", target, scaledTargetKeys))
	}
	triggers, _ := spec["triggers"].([]any)
	if len(triggers) == 0 {
		errs = append(errs, errors.New("spec.triggers missing"))
	}
	for i, tr := range triggers {
		trm, _ := tr.(map[string]any)
		errs = append(errs, checkKeys(fmt.Sprintf("spec.triggers[%d]", i), trm, scaledTriggerKeys))
		if trm["type"] == "kafka" {
			md, _ := trm["metadata"].(map[string]any)
			errs = append(errs, checkKeys(fmt.Sprintf("spec.triggers[%d].metadata", i), md, kedaKafkaKeys))
			for k, v := range md {
				if _, ok := v.(string); !ok {
					errs = append(errs, fmt.Errorf("spec.triggers[%d].metadata.%s must be a string, got %T", i, k, v))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// secretTemplate decodes deploy/k8s/base/secret.template.yaml strictly.
func secretTemplate(tb testing.TB) *corev1.Secret {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(tb), "deploy", "k8s", "base", "secret.template.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	var s corev1.Secret
	if err := decodeStrict(b, &s); err != nil {
		tb.Fatalf("secret.template.yaml: %v", err)
	}
	return &s
}

// containerEnv resolves what a container's process sees: envFrom
// ConfigMaps, then env (literal values, ConfigMap keys, and Secret keys
// taken from the secret template's placeholders). It reports where each
// variable came from ("configmap", "secret", "literal", "field").
func containerEnv(tb testing.TB, r *rendered, secret *corev1.Secret, c corev1.Container) (env, source map[string]string) {
	tb.Helper()
	env, source = map[string]string{}, map[string]string{}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			cm, ok := r.configMaps[ef.ConfigMapRef.Name]
			if !ok {
				tb.Fatalf("%s: container %s: envFrom ConfigMap %q is not rendered", r.overlay, c.Name, ef.ConfigMapRef.Name)
			}
			for k, v := range cm.Data {
				env[ef.Prefix+k], source[ef.Prefix+k] = v, "configmap"
			}
		default:
			tb.Fatalf("%s: container %s: envFrom other than a ConfigMap (secrets go through env with secretKeyRef, one key at a time)", r.overlay, c.Name)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name], source[e.Name] = e.Value, "literal"
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if ref.Name != secret.Name {
				tb.Errorf("%s: container %s: %s reads Secret %q; the template defines %q", r.overlay, c.Name, e.Name, ref.Name, secret.Name)
			}
			v, ok := secret.StringData[ref.Key]
			if !ok {
				tb.Errorf("%s: container %s: %s reads key %q, which secret.template.yaml does not have", r.overlay, c.Name, e.Name, ref.Key)
			}
			env[e.Name], source[e.Name] = v, "secret"
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, ok := r.configMaps[ref.Name]
			if !ok {
				tb.Fatalf("%s: container %s: %s reads ConfigMap %q, which is not rendered", r.overlay, c.Name, e.Name, ref.Name)
			}
			env[e.Name], source[e.Name] = cm.Data[ref.Key], "configmap"
		default:
			env[e.Name], source[e.Name] = "", "field"
		}
	}
	return env, source
}

// secretLike names the variables that hold credentials.
func secretLike(name string) bool {
	return strings.Contains(name, "TOKEN") || strings.Contains(name, "PASSWORD") || strings.Contains(name, "DSN") || strings.Contains(name, "SECRET")
}

// allowedNonNotiflowEnv are the variables other than NOTIFLOW_* a service
// container may get (Go runtime settings).
var allowedNonNotiflowEnv = []string{"GOMEMLIMIT", "GOMAXPROCS", "GOGC", "GODEBUG"}

// containerPort resolves a probe's or Service's port (number or name).
func containerPort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	if p.Type == intstr.Int {
		return p.IntVal, true
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

func TestKustomizeOverlays(t *testing.T) {
	secret := secretTemplate(t)
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			r := render(t, overlay)
			checkNamespaces(t, r)
			partitions := 0
			for _, name := range services {
				res := checkDeployment(t, r, secret, name)
				if name == "dispatcher" {
					partitions = res.int(t, "NOTIFLOW_KAFKA_PARTITIONS")
					checkAutoscaling(t, r, res, partitions)
				}
			}
			checkPDBs(t, r)
			checkDependencies(t, r)
			checkNetworkPolicies(t, r)
			checkTopicsJob(t, r)
			checkDashboardConfigMap(t, r)
			checkPodMonitors(t, r)
			if len(r.secrets) != 0 {
				t.Errorf("the overlay renders %d Secret(s): real values must never be applied from the repository (see secret.template.yaml)", len(r.secrets))
			}
		})
	}
}

func checkNamespaces(t *testing.T, r *rendered) {
	t.Helper()
	if len(r.namespaces) != 1 || r.namespaces[0].Name != namespace {
		t.Errorf("want exactly the Namespace %q", namespace)
	}
	for _, m := range r.metas {
		if _, isNS := m.(*corev1.Namespace); isNS {
			continue
		}
		if m.GetNamespace() != namespace {
			t.Errorf("%T %s is in namespace %q, want %q", m, m.GetName(), m.GetNamespace(), namespace)
		}
	}
	for _, so := range r.scaled {
		md, _ := so["metadata"].(map[string]any)
		if md["namespace"] != namespace {
			t.Errorf("ScaledObject %v is in namespace %v, want %q", md["name"], md["namespace"], namespace)
		}
	}
}

// checkDeployment checks the Deployment, its Service and its container,
// and returns the service's effective configuration.
func checkDeployment(t *testing.T, r *rendered, secret *corev1.Secret, name string) printedConfig {
	t.Helper()
	d, ok := r.deployments[name]
	if !ok {
		t.Fatalf("no Deployment %s", name)
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("Deployment %s: want one container, got %d", name, len(pod.Containers))
	}
	c := pod.Containers[0]
	checkPodSecurity(t, "Deployment "+name, pod)
	checkResources(t, "Deployment "+name, c)
	checkGoMemLimit(t, r.overlay+" Deployment "+name, c)

	// Image: the service's name (the Dockerfile's SERVICE), a pinned tag.
	repo, tag, _ := strings.Cut(c.Image[strings.LastIndex(c.Image, "/")+1:], ":")
	imageName := c.Image[:strings.LastIndex(c.Image, "/")+1] + repo
	if !strings.HasSuffix(imageName, "notiflow/"+name) {
		t.Errorf("Deployment %s: image %q is not notiflow/%s (built from the Dockerfile with SERVICE=%s)", name, c.Image, name, name)
	}
	if tag == "" || tag == "latest" {
		t.Errorf("Deployment %s: image %q: pin a tag in the overlay (images: newTag)", name, c.Image)
	}
	if _, err := os.Stat(filepath.Join(repoRoot(t), "Dockerfile")); err != nil {
		t.Errorf("Deployment %s: %v", name, err)
	}
	if _, err := os.Stat(filepath.Join(repoRoot(t), "services", name, "go.mod")); err != nil {
		t.Errorf("Deployment %s: no service %s for the Dockerfile's SERVICE: %v", name, name, err)
	}

	// Environment: only variables the service reads, loaded and validated
	// by the service's own config code; credentials only from the Secret.
	env, source := containerEnv(t, r, secret, c)
	notiflow := map[string]string{}
	for k, v := range env {
		switch {
		case strings.HasPrefix(k, "NOTIFLOW_"):
			notiflow[k] = v
			if secretLike(k) && source[k] != "secret" {
				t.Errorf("Deployment %s: %s comes from a %s; credentials must come from the Secret", name, k, source[k])
			}
		case !slices.Contains(allowedNonNotiflowEnv, k):
			t.Errorf("Deployment %s: variable %s is neither NOTIFLOW_* nor a Go runtime setting", name, k)
		}
	}
	res := configOf(t, name).checkEnv(t, r.overlay+" Deployment "+name, notiflow)

	// Probes and Service on the port the service listens on.
	port := int32(res.httpPort(t))
	probes := map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe}
	wantPath := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}
	for kind, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("Deployment %s: no HTTP %s probe", name, kind)
			continue
		}
		if p.HTTPGet.Path != wantPath[kind] {
			t.Errorf("Deployment %s: %s probe path %q, want %q", name, kind, p.HTTPGet.Path, wantPath[kind])
		}
		if got, ok := containerPort(c, p.HTTPGet.Port); !ok || got != port {
			t.Errorf("Deployment %s: %s probe port %s resolves to %d, the service listens on %d (NOTIFLOW_HTTP_ADDR)", name, kind, p.HTTPGet.Port.String(), got, port)
		}
	}
	if sp := c.StartupProbe; sp != nil && sp.HTTPGet != nil {
		if got, _ := containerPort(c, sp.HTTPGet.Port); got != port {
			t.Errorf("Deployment %s: startup probe port %d, want %d", name, got, port)
		}
	}
	if a := d.Spec.Template.Annotations["prometheus.io/port"]; a != strconv.Itoa(int(port)) {
		t.Errorf("Deployment %s: annotation prometheus.io/port=%q, want %d", name, a, port)
	}
	svc, ok := r.services[name]
	if !ok {
		t.Errorf("no Service %s", name)
	} else {
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) || len(svc.Spec.Selector) == 0 {
			t.Errorf("Service %s: selector %v does not select the Deployment's pods %v", name, svc.Spec.Selector, d.Spec.Template.Labels)
		}
		for _, sp := range svc.Spec.Ports {
			if got, ok := containerPort(c, sp.TargetPort); !ok || got != port {
				t.Errorf("Service %s: targetPort %s resolves to %d, the service listens on %d", name, sp.TargetPort.String(), got, port)
			}
		}
	}

	// Shutdown: the drain and then the HTTP server's shutdown are each
	// bounded by NOTIFLOW_SHUTDOWN_TIMEOUT; the kubelet's SIGKILL must come
	// later than both.
	shutdown := res.duration(t, "NOTIFLOW_SHUTDOWN_TIMEOUT")
	if pod.TerminationGracePeriodSeconds == nil {
		t.Errorf("Deployment %s: terminationGracePeriodSeconds unset (default 30s)", name)
	} else if grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second; grace <= 2*shutdown {
		t.Errorf("Deployment %s: terminationGracePeriodSeconds %s must exceed 2 x NOTIFLOW_SHUTDOWN_TIMEOUT (%s)", name, grace, shutdown)
	}
	checkPreStop(t, r.overlay+" Deployment "+name, pod, c, shutdown)

	// Rollout without loss: never below the desired count of ready pods.
	ru := d.Spec.Strategy.RollingUpdate
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("Deployment %s: want a RollingUpdate with maxUnavailable 0", name)
	}
	if !labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("Deployment %s: selector does not match its pod labels", name)
	}
	return res
}

func checkPodSecurity(t *testing.T, where string, pod corev1.PodSpec) {
	t.Helper()
	psc := pod.SecurityContext
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("%s: automountServiceAccountToken must be false (the services do not call the API server)", where)
	}
	for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("%s: container %s has no securityContext", where, c.Name)
			continue
		}
		nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (sc.RunAsNonRoot == nil && psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot)
		if !nonRoot {
			t.Errorf("%s: container %s: runAsNonRoot is not true", where, c.Name)
		}
		uid := sc.RunAsUser
		if uid == nil && psc != nil {
			uid = psc.RunAsUser
		}
		if uid == nil || *uid == 0 {
			t.Errorf("%s: container %s: set a numeric non-zero runAsUser (the kubelet cannot verify a named image user)", where, c.Name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: container %s: readOnlyRootFilesystem is not true", where, c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: container %s: allowPrivilegeEscalation is not false", where, c.Name)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: container %s: capabilities must drop ALL and add none", where, c.Name)
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil && psc != nil {
			seccomp = psc.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: container %s: seccompProfile must be RuntimeDefault", where, c.Name)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: container %s is privileged", where, c.Name)
		}
	}
}

func checkResources(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := c.Resources.Requests[res]
		lim, hasLim := c.Resources.Limits[res]
		if !hasReq || !hasLim {
			t.Errorf("%s: container %s: set both requests and limits for %s", where, c.Name, res)
			continue
		}
		if req.Cmp(lim) > 0 {
			t.Errorf("%s: container %s: %s request %s above limit %s", where, c.Name, res, req.String(), lim.String())
		}
		if req.Cmp(resource.Quantity{}) <= 0 {
			t.Errorf("%s: container %s: %s request must be positive", where, c.Name, res)
		}
	}
}

// checkAutoscaling: at most one autoscaler owns the dispatcher, and none
// may add replicas beyond the partition count (they would idle).
func checkAutoscaling(t *testing.T, r *rendered, dispatcher printedConfig, partitions int) {
	t.Helper()
	d := r.deployments["dispatcher"]
	owners := 0
	for _, h := range r.hpas {
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != "dispatcher" {
			t.Errorf("HPA %s targets %s/%s; only the dispatcher is autoscaled", h.Name, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
			continue
		}
		owners++
		if int(h.Spec.MaxReplicas) > partitions {
			t.Errorf("HPA %s: maxReplicas %d exceeds NOTIFLOW_KAFKA_PARTITIONS %d", h.Name, h.Spec.MaxReplicas, partitions)
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
			t.Errorf("HPA %s: minReplicas must be between 1 and maxReplicas", h.Name)
		}
		if len(h.Spec.Metrics) == 0 {
			t.Errorf("HPA %s: no metrics", h.Name)
		}
	}
	for _, so := range r.scaled {
		owners++
		spec := so["spec"].(map[string]any)
		target := spec["scaleTargetRef"].(map[string]any)
		if target["name"] != "dispatcher" {
			t.Errorf("ScaledObject targets %v, want dispatcher", target["name"])
		}
		maxR, ok := spec["maxReplicaCount"].(float64)
		if !ok {
			t.Errorf("ScaledObject: set maxReplicaCount (KEDA's default is 100)")
		} else if int(maxR) > partitions {
			t.Errorf("ScaledObject: maxReplicaCount %v exceeds NOTIFLOW_KAFKA_PARTITIONS %d", maxR, partitions)
		}
		minR, _ := spec["minReplicaCount"].(float64)
		if minR < 1 || (ok && minR > maxR) {
			t.Errorf("ScaledObject: minReplicaCount %v must be between 1 and maxReplicaCount", minR)
		}
		triggers := spec["triggers"].([]any)
		if len(triggers) != 1 {
			t.Fatalf("ScaledObject: want one kafka trigger, got %d", len(triggers))
		}
		tr := triggers[0].(map[string]any)
		md, _ := tr["metadata"].(map[string]any)
		want := map[string]string{
			"bootstrapServers": dispatcher.value(t, "NOTIFLOW_KAFKA_BROKERS"),
			"topic":            dispatcher.value(t, "NOTIFLOW_TOPIC_DUE"),
			"consumerGroup":    dispatcher.value(t, "NOTIFLOW_GROUP"),
		}
		if tr["type"] != "kafka" {
			t.Errorf("ScaledObject trigger type %v, want kafka", tr["type"])
		}
		for k, v := range want {
			if md[k] != v {
				t.Errorf("ScaledObject trigger %s=%v, the dispatcher uses %q", k, md[k], v)
			}
		}
		if n, err := strconv.Atoi(fmt.Sprint(md["lagThreshold"])); err != nil || n <= 0 {
			t.Errorf("ScaledObject trigger lagThreshold=%v: want a positive integer", md["lagThreshold"])
		}
		if md["allowIdleConsumers"] == "true" {
			t.Errorf("ScaledObject: allowIdleConsumers=true would add replicas beyond the partitions")
		}
		checkKEDATrigger(t, spec, tr)
	}
	switch {
	case owners > 1:
		t.Errorf("%d autoscalers own the dispatcher; use one (KEDA or the CPU HPA)", owners)
	case owners == 1 && d.Spec.Replicas != nil:
		t.Errorf("the dispatcher is autoscaled but its Deployment sets replicas (%d): every apply would reset the autoscaler's count", *d.Spec.Replicas)
	}
	if owners == 0 && (d.Spec.Replicas == nil || int(*d.Spec.Replicas) > partitions) {
		t.Errorf("dispatcher replicas must be set and at most NOTIFLOW_KAFKA_PARTITIONS (%d)", partitions)
	}
	switch r.overlay {
	case "dev":
		if owners != 0 || d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
			t.Errorf("dev: want one dispatcher replica, no autoscaler")
		}
	case "prod":
		if len(r.scaled) != 1 || len(r.hpas) != 0 {
			t.Errorf("prod: want the KEDA ScaledObject and no HPA")
		}
	case "prod-hpa":
		if len(r.hpas) != 1 || len(r.scaled) != 0 {
			t.Errorf("prod-hpa: want the CPU HPA and no ScaledObject")
		}
	}
	if strings.HasPrefix(r.overlay, "prod") {
		if s := r.deployments["scheduler"].Spec.Replicas; s == nil || *s != 2 {
			t.Errorf("%s: want 2 scheduler replicas", r.overlay)
		}
	}
}

func checkPDBs(t *testing.T, r *rendered) {
	t.Helper()
	for _, name := range services {
		d := r.deployments[name]
		var found *policyv1.PodDisruptionBudget
		for _, p := range r.pdbs {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err != nil {
				t.Fatalf("PDB %s: %v", p.Name, err)
			}
			if !sel.Empty() && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				found = p
			}
		}
		if found == nil {
			t.Errorf("no PodDisruptionBudget selects the %s pods", name)
			continue
		}
		// minAvailable equal to the replicas would block every node drain.
		if found.Spec.MaxUnavailable == nil || found.Spec.MaxUnavailable.IntValue() < 1 {
			t.Errorf("PDB %s: want maxUnavailable >= 1 (works for any replica count, never blocks a drain)", found.Name)
		}
	}
}

// checkNetworkPolicies: a default deny, each service's port reachable for
// scrapes (and the scheduler's API), DNS and Kafka egress for every pod.
func checkNetworkPolicies(t *testing.T, r *rendered) {
	t.Helper()
	denyAll := false
	for _, np := range r.netpols {
		if len(np.Spec.PodSelector.MatchLabels) == 0 && len(np.Spec.PodSelector.MatchExpressions) == 0 &&
			slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) && slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) &&
			len(np.Spec.Ingress) == 0 && len(np.Spec.Egress) == 0 {
			denyAll = true
		}
	}
	if !denyAll {
		t.Errorf("no default-deny NetworkPolicy (empty podSelector, Ingress and Egress, no rules)")
	}
	podsAllowed := func(podLabels map[string]string, ingress bool, port int32, proto corev1.Protocol) bool {
		for _, np := range r.netpols {
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil {
				t.Fatalf("NetworkPolicy %s: %v", np.Name, err)
			}
			if !sel.Matches(labels.Set(podLabels)) {
				continue
			}
			var rulesPorts [][]networkingv1.NetworkPolicyPort
			if ingress {
				for _, rule := range np.Spec.Ingress {
					rulesPorts = append(rulesPorts, rule.Ports)
				}
			} else {
				for _, rule := range np.Spec.Egress {
					rulesPorts = append(rulesPorts, rule.Ports)
				}
			}
			for _, ports := range rulesPorts {
				if len(ports) == 0 {
					return true
				}
				for _, p := range ports {
					pp := corev1.ProtocolTCP
					if p.Protocol != nil {
						pp = *p.Protocol
					}
					if pp == proto && p.Port != nil && p.Port.IntValue() == int(port) {
						return true
					}
				}
			}
		}
		return false
	}
	pods := map[string]map[string]string{}
	for name, d := range r.deployments {
		pods["Deployment "+name] = d.Spec.Template.Labels
		port := d.Spec.Template.Spec.Containers[0].Ports[0].ContainerPort
		if !podsAllowed(d.Spec.Template.Labels, true, port, corev1.ProtocolTCP) {
			t.Errorf("NetworkPolicies admit no ingress to %s on its port %d (metrics scrapes)", name, port)
		}
	}
	for name, j := range r.jobs {
		pods["Job "+name] = j.Spec.Template.Labels
	}
	for what, l := range pods {
		for _, want := range []struct {
			port  int32
			proto corev1.Protocol
		}{{53, corev1.ProtocolUDP}, {53, corev1.ProtocolTCP}, {9092, corev1.ProtocolTCP}} {
			if !podsAllowed(l, false, want.port, want.proto) {
				t.Errorf("NetworkPolicies deny %s egress to %s/%d", what, want.proto, want.port)
			}
		}
	}
	needs := map[string][]int32{"scheduler": {3306, 6379}, "dispatcher": {6379, 443}, "sink": {3306}}
	for name, ports := range needs {
		for _, p := range ports {
			if !podsAllowed(r.deployments[name].Spec.Template.Labels, false, p, corev1.ProtocolTCP) {
				t.Errorf("NetworkPolicies deny %s egress to TCP/%d", name, p)
			}
		}
	}
}

// dependencyClients are the in-cluster dependencies of components/deps: the
// StatefulSet, its port, the Service the configuration names it by, and
// the pods that must reach it.
var dependencyClients = []struct {
	name    string
	port    int32
	clients []string
}{
	{"kafka", 9092, []string{"scheduler", "dispatcher", "sink"}},
	{"mysql", 3306, []string{"scheduler", "sink"}},
	{"redis", 6379, []string{"scheduler", "dispatcher"}},
}

// checkDependencies: the in-cluster Kafka, MySQL and Redis of the local
// overlays (all three or none) run under the same restrictions as the
// services, behind a Service of the name the configuration uses, with a
// NetworkPolicy that admits their clients on their port and nothing else.
func checkDependencies(t *testing.T, r *rendered) {
	t.Helper()
	if len(r.stateful) == 0 {
		return
	}
	for _, dep := range dependencyClients {
		s, ok := r.stateful[dep.name]
		if !ok {
			t.Errorf("StatefulSet %s missing: components/deps brings all three dependencies", dep.name)
			continue
		}
		pod := s.Spec.Template.Spec
		checkPodSecurity(t, "StatefulSet "+dep.name, pod)
		for _, c := range pod.Containers {
			checkResources(t, "StatefulSet "+dep.name, c)
			if c.ReadinessProbe == nil {
				t.Errorf("StatefulSet %s: container %s has no readiness probe", dep.name, c.Name)
			}
		}
		svc, ok := r.services[dep.name]
		if !ok || !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == dep.port }) {
			t.Errorf("no Service %s on port %d for StatefulSet %s", dep.name, dep.port, dep.name)
		} else if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(s.Spec.Template.Labels)) {
			t.Errorf("Service %s does not select the StatefulSet's pods", dep.name)
		}
		for _, client := range dep.clients {
			if !ingressAdmits(t, r, s.Spec.Template.Labels, r.deployments[client].Spec.Template.Labels, dep.port) {
				t.Errorf("NetworkPolicies do not admit %s to %s on TCP/%d", client, dep.name, dep.port)
			}
		}
		if ingressAdmits(t, r, s.Spec.Template.Labels, map[string]string{"app.kubernetes.io/name": "intruder"}, dep.port) &&
			dep.name != "kafka" {
			t.Errorf("NetworkPolicies admit any pod of the namespace to %s", dep.name)
		}
	}
}

// ingressAdmits: some NetworkPolicy selecting the pods labelled target
// admits a pod of the same namespace labelled from on TCP port.
func ingressAdmits(t *testing.T, r *rendered, target, from map[string]string, port int32) bool {
	t.Helper()
	for _, np := range r.netpols {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Fatalf("NetworkPolicy %s: %v", np.Name, err)
		}
		if !sel.Matches(labels.Set(target)) {
			continue
		}
		for _, rule := range np.Spec.Ingress {
			peerOK := len(rule.From) == 0
			for _, peer := range rule.From {
				if peer.PodSelector == nil || peer.NamespaceSelector != nil {
					continue
				}
				ps, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
				if err != nil {
					t.Fatalf("NetworkPolicy %s: %v", np.Name, err)
				}
				peerOK = peerOK || ps.Matches(labels.Set(from))
			}
			portOK := len(rule.Ports) == 0
			for _, p := range rule.Ports {
				portOK = portOK || (p.Port != nil && p.Port.IntValue() == int(port))
			}
			if peerOK && portOK {
				return true
			}
		}
	}
	return false
}

// checkTopicsJob: the topic-setup Job runs the shipped script with the
// same Kafka settings as the services, hardened like them.
func checkTopicsJob(t *testing.T, r *rendered) {
	t.Helper()
	j, ok := r.jobs["notiflow-topics"]
	if !ok {
		t.Fatalf("no Job notiflow-topics")
	}
	pod := j.Spec.Template.Spec
	checkPodSecurity(t, "Job notiflow-topics", pod)
	if len(pod.Containers) != 1 {
		t.Fatalf("Job notiflow-topics: want one container")
	}
	c := pod.Containers[0]
	checkResources(t, "Job notiflow-topics", c)
	// The broker's image: the compose broker's, or the in-cluster one of
	// components/deps, whose Kafka tools the script then uses.
	wantImage := kafkaImage
	if k, ok := r.stateful["kafka"]; ok {
		wantImage = k.Spec.Template.Spec.Containers[0].Image
	}
	if c.Image != wantImage {
		t.Errorf("Job notiflow-topics: image %q, want %q (the broker's)", c.Image, wantImage)
	}
	if j.Spec.TTLSecondsAfterFinished == nil {
		t.Errorf("Job notiflow-topics: set ttlSecondsAfterFinished so a later apply can run it again")
	}
	// The script file from its ConfigMap at the path the command runs.
	script, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "kafka", "create-topics.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var scriptPath string
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name != vm.Name || v.ConfigMap == nil {
				continue
			}
			cm, ok := r.configMaps[v.ConfigMap.Name]
			if !ok {
				t.Fatalf("Job notiflow-topics: volume %s: ConfigMap %s not rendered", v.Name, v.ConfigMap.Name)
			}
			if cm.Data["create-topics.sh"] != string(script) {
				t.Errorf("ConfigMap %s does not hold deploy/kafka/create-topics.sh", cm.Name)
			}
			scriptPath = vm.MountPath + "/create-topics.sh"
		}
	}
	if !slices.Contains(append(append([]string{}, c.Command...), c.Args...), scriptPath) {
		t.Errorf("Job notiflow-topics: command %v does not run %s", c.Command, scriptPath)
	}
	// Same Kafka settings as the dispatcher (all three share notiflow-common).
	env, _ := containerEnv(t, r, secretTemplate(t), c)
	dEnv, _ := containerEnv(t, r, secretTemplate(t), r.deployments["dispatcher"].Spec.Template.Spec.Containers[0])
	for _, k := range []string{"NOTIFLOW_KAFKA_BROKERS", "NOTIFLOW_KAFKA_PARTITIONS", "NOTIFLOW_KAFKA_REPLICATION_FACTOR",
		"NOTIFLOW_TOPIC_DUE", "NOTIFLOW_TOPIC_DISPATCHED", "NOTIFLOW_TOPIC_DLQ"} {
		if env[k] == "" || env[k] != dEnv[k] {
			t.Errorf("Job notiflow-topics: %s=%q, the services use %q", k, env[k], dEnv[k])
		}
	}
	// A read-only root filesystem needs a writable /tmp for the JVM.
	tmp := false
	for _, vm := range c.VolumeMounts {
		tmp = tmp || vm.MountPath == "/tmp"
	}
	if !tmp {
		t.Errorf("Job notiflow-topics: mount an emptyDir at /tmp (read-only root filesystem)")
	}
}

func checkDashboardConfigMap(t *testing.T, r *rendered) {
	t.Helper()
	want, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "grafana", "dashboards", "notiflow.json"))
	if err != nil {
		t.Fatal(err)
	}
	cm, ok := r.configMaps["notiflow-grafana-dashboard"]
	if !ok {
		t.Fatalf("no ConfigMap notiflow-grafana-dashboard")
	}
	if cm.Data["notiflow.json"] != string(want) {
		t.Errorf("ConfigMap notiflow-grafana-dashboard does not hold deploy/grafana/dashboards/notiflow.json")
	}
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap notiflow-grafana-dashboard: label grafana_dashboard=1 missing (Grafana sidecar)")
	}
}

// TestSecretTemplate: placeholders only, and every key a Deployment reads.
func TestSecretTemplate(t *testing.T) {
	s := secretTemplate(t)
	if len(s.Data) != 0 {
		t.Errorf("secret.template.yaml: use stringData placeholders, no data")
	}
	for k, v := range s.StringData {
		if v != "" && !strings.Contains(v, "CHANGE-ME") {
			t.Errorf("secret.template.yaml: %s=%q is not a placeholder (CHANGE-ME or empty)", k, v)
		}
	}
	r := render(t, "prod")
	used := map[string]bool{}
	for _, d := range r.deployments {
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				used[e.ValueFrom.SecretKeyRef.Key] = true
			}
		}
	}
	for k := range s.StringData {
		if !used[k] {
			t.Errorf("secret.template.yaml: key %s is read by no Deployment", k)
		}
	}
}

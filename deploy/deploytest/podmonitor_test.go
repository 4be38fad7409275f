package deploytest

import (
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// podMonitor is the part of the Prometheus Operator's
// monitoring.coreos.com/v1 PodMonitor that notiflow's component uses,
// with the Operator's field names: decoded strictly, a field outside it
// fails the test (add it here, from the Operator's API, when a manifest
// needs it).
type podMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              podMonitorSpec `json:"spec"`
}

type podMonitorSpec struct {
	JobLabel            string                `json:"jobLabel,omitempty"`
	PodTargetLabels     []string              `json:"podTargetLabels,omitempty"`
	Selector            metav1.LabelSelector  `json:"selector"`
	NamespaceSelector   *podMonitorNamespaces `json:"namespaceSelector,omitempty"`
	PodMetricsEndpoints []podMetricsEndpoint  `json:"podMetricsEndpoints"`
	SampleLimit         *uint64               `json:"sampleLimit,omitempty"`
}

type podMonitorNamespaces struct {
	Any        bool     `json:"any,omitempty"`
	MatchNames []string `json:"matchNames,omitempty"`
}

type podMetricsEndpoint struct {
	Port          *string `json:"port,omitempty"`
	PortNumber    *int32  `json:"portNumber,omitempty"`
	Path          string  `json:"path,omitempty"`
	Scheme        string  `json:"scheme,omitempty"`
	Interval      string  `json:"interval,omitempty"`
	ScrapeTimeout string  `json:"scrapeTimeout,omitempty"`
	HonorLabels   bool    `json:"honorLabels,omitempty"`
}

// checkPodMonitors: each service's pods are selected by a PodMonitor in
// their namespace that scrapes the port and path their prometheus.io
// annotations name (the HTTP port, /metrics), at a sane interval.
func checkPodMonitors(t *testing.T, r *rendered) {
	t.Helper()
	for _, pm := range r.podMonitors {
		if len(pm.Spec.PodMetricsEndpoints) == 0 {
			t.Errorf("PodMonitor %s: no podMetricsEndpoints", pm.Name)
		}
		for i, ep := range pm.Spec.PodMetricsEndpoints {
			if ep.Interval == "" {
				continue
			}
			interval, err := time.ParseDuration(ep.Interval)
			if err != nil || interval < time.Second {
				t.Errorf("PodMonitor %s: podMetricsEndpoints[%d].interval %q: want a duration of at least 1s", pm.Name, i, ep.Interval)
			}
			if ep.ScrapeTimeout != "" {
				if timeout, err := time.ParseDuration(ep.ScrapeTimeout); err != nil || timeout > interval {
					t.Errorf("PodMonitor %s: podMetricsEndpoints[%d].scrapeTimeout %q: want a duration no longer than the interval", pm.Name, i, ep.ScrapeTimeout)
				}
			}
		}
	}
	for _, name := range services {
		d := r.deployments[name]
		c := d.Spec.Template.Spec.Containers[0]
		wantPort := d.Spec.Template.Annotations["prometheus.io/port"]
		wantPath := d.Spec.Template.Annotations["prometheus.io/path"]
		scraped := false
		for _, pm := range r.podMonitors {
			sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
			if err != nil {
				t.Fatalf("PodMonitor %s: %v", pm.Name, err)
			}
			ns := pm.Spec.NamespaceSelector
			inNamespace := pm.Namespace == d.Namespace && (ns == nil || (!ns.Any && len(ns.MatchNames) == 0)) ||
				ns != nil && (ns.Any || slices.Contains(ns.MatchNames, d.Namespace))
			if sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) || !inNamespace {
				continue
			}
			for i, ep := range pm.Spec.PodMetricsEndpoints {
				var port int32
				var ok bool
				switch {
				case ep.Port != nil:
					port, ok = containerPort(c, intstr.FromString(*ep.Port))
				case ep.PortNumber != nil:
					port, ok = *ep.PortNumber, true
				}
				path := ep.Path
				if path == "" {
					path = "/metrics" // the Operator's default
				}
				if !ok {
					t.Errorf("PodMonitor %s: podMetricsEndpoints[%d] names no port of the %s container (want its named port or portNumber)", pm.Name, i, name)
					continue
				}
				if strconv.Itoa(int(port)) != wantPort || path != wantPath {
					t.Errorf("PodMonitor %s: podMetricsEndpoints[%d] scrapes %s on port %d, path %s; the service serves metrics on %s%s",
						pm.Name, i, name, port, path, wantPort, wantPath)
					continue
				}
				scraped = true
			}
		}
		if len(r.podMonitors) > 0 && !scraped {
			t.Errorf("%s: no PodMonitor scrapes the %s pods", r.overlay, name)
		}
	}
}

// TestPodMonitorComponent renders the prod overlay with the optional
// components/podmonitor (deploytest/testdata/prod-podmonitor) and checks
// that the PodMonitor decodes and scrapes every service.
func TestPodMonitorComponent(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "deploy", "deploytest", "testdata", "prod-podmonitor")
	r := renderDir(t, "prod+podmonitor", dir)
	if len(r.podMonitors) != 1 {
		t.Fatalf("want one PodMonitor from components/podmonitor, got %d", len(r.podMonitors))
	}
	checkNamespaces(t, r)
	checkPodMonitors(t, r)
	if pm := r.podMonitors[0]; pm.Spec.JobLabel != "app.kubernetes.io/name" {
		t.Errorf("PodMonitor %s: jobLabel %q, want app.kubernetes.io/name (job=scheduler|dispatcher|sink, as deploy/prometheus/kubernetes-scrape.yml labels them)", pm.Name, pm.Spec.JobLabel)
	}
}

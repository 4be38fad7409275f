package deploytest

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
)

// kedaNamespace is where KEDA's operator runs by default (its Helm chart and
// release manifests); it resolves the trigger's bootstrapServers from there.
const kedaNamespace = "keda"

// checkBrokersReachable reports each broker of a comma-separated
// bootstrapServers list that a pod outside namespace ns (KEDA's operator)
// cannot resolve as meant: a bare Service name (the DNS search path of the
// resolving pod's own namespace completes it), the namespace-relative form
// <service>.<namespace>, or an in-cluster name (.svc.) that is not
// qualified down to the cluster domain or names another namespace.
// Anything else is taken for an external broker.
func checkBrokersReachable(brokers, ns string) error {
	var errs []error
	if strings.TrimSpace(brokers) == "" {
		return errors.New("no brokers")
	}
	for _, b := range strings.Split(brokers, ",") {
		host, port, err := net.SplitHostPort(strings.TrimSpace(b))
		if err != nil || host == "" || port == "" {
			errs = append(errs, fmt.Errorf("broker %q: want host:port", b))
			continue
		}
		if net.ParseIP(host) != nil {
			continue
		}
		labels := strings.Split(strings.TrimSuffix(host, "."), ".")
		svcAt := -1
		for i, l := range labels {
			if l == "svc" {
				svcAt = i
				break
			}
		}
		switch {
		case len(labels) == 1:
			errs = append(errs, fmt.Errorf("broker %q: a bare Service name resolves only inside the namespace of the pod that looks it up; "+
				"KEDA looks it up from %q: use <service>.%s.svc.cluster.local", b, kedaNamespace, ns))
		case len(labels) == 2 && labels[1] == ns:
			errs = append(errs, fmt.Errorf("broker %q: <service>.<namespace> resolves only through the search path; use %s.svc.cluster.local", b, host))
		case svcAt >= 0 && (svcAt < 2 || labels[svcAt-1] != ns || svcAt == len(labels)-1):
			errs = append(errs, fmt.Errorf("broker %q: an in-cluster name must be <service>.%s.svc.<cluster domain> (or <pod>.<service>.%s.svc.<cluster domain>) (the namespace the overlay deploys to)", b, ns, ns))
		}
	}
	return errors.Join(errs...)
}

func TestCheckBrokersReachable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give    string
		wantErr bool
	}{
		{give: "kafka:9092", wantErr: true},
		{give: "kafka.notiflow:9092", wantErr: true},
		{give: "kafka.other.svc.cluster.local:9092", wantErr: true},
		{give: "kafka.notiflow.svc:9092", wantErr: true},
		{give: "kafka.notiflow.svc.cluster.local:9092,kafka:9092", wantErr: true},
		{give: "kafka.notiflow.svc.cluster.local", wantErr: true},
		{give: "", wantErr: true},
		{give: "kafka.notiflow.svc.cluster.local:9092", wantErr: false},
		{give: "kafka-0.kafka.notiflow.svc.cluster.local:9092", wantErr: false},
		{give: "kafka.svc.cluster.local:9092", wantErr: true},
		{give: "kafka.notiflow.svc.example.internal:9092", wantErr: false},
		{give: "b-1.kafka.internal:9092,b-2.kafka.internal:9092", wantErr: false},
		{give: "10.0.0.7:9092", wantErr: false},
	}
	for _, tt := range tests {
		err := checkBrokersReachable(tt.give, namespace)
		if (err != nil) != tt.wantErr {
			t.Errorf("checkBrokersReachable(%q) = %v, want error: %v", tt.give, err, tt.wantErr)
		}
	}
}

// kedaFallbackKeys are the fields of a ScaledObject's spec.fallback (KEDA
// 2.x; behavior since 2.17).
var kedaFallbackKeys = []string{"failureThreshold", "replicas", "behavior"}

// checkKEDATrigger checks what a real cluster needs of the dispatcher's
// ScaledObject beyond its schema: brokers KEDA can resolve from its own
// namespace, a fallback replica count within the scaling bounds, and
// scaling capped at the partitions that have lag.
func checkKEDATrigger(t *testing.T, spec map[string]any, trigger map[string]any) {
	t.Helper()
	md, _ := trigger["metadata"].(map[string]any)
	brokers, _ := md["bootstrapServers"].(string)
	if err := checkBrokersReachable(brokers, namespace); err != nil {
		t.Errorf("ScaledObject trigger bootstrapServers=%q (copied from NOTIFLOW_KAFKA_BROKERS): %v", brokers, err)
	}
	if md["limitToPartitionsWithLag"] != "true" {
		t.Errorf("ScaledObject trigger: limitToPartitionsWithLag=%v, want \"true\" (replicas beyond the partitions with lag only rebalance)", md["limitToPartitionsWithLag"])
	}
	if mt, ok := trigger["metricType"]; ok && mt != "AverageValue" {
		t.Errorf("ScaledObject trigger metricType %v: the fallback needs AverageValue", mt)
	}
	fb, _ := spec["fallback"].(map[string]any)
	if fb == nil {
		t.Errorf("ScaledObject: no spec.fallback (replicas to hold when the scaler fails)")
		return
	}
	if err := checkKeys("spec.fallback", fb, kedaFallbackKeys); err != nil {
		t.Error(err)
	}
	threshold, _ := fb["failureThreshold"].(float64)
	if threshold < 1 {
		t.Errorf("ScaledObject: fallback.failureThreshold %v, want at least 1", fb["failureThreshold"])
	}
	replicas, _ := fb["replicas"].(float64)
	minR, _ := spec["minReplicaCount"].(float64)
	maxR, _ := spec["maxReplicaCount"].(float64)
	if replicas < minR || replicas > maxR || replicas < 1 {
		t.Errorf("ScaledObject: fallback.replicas %v, want between minReplicaCount %v and maxReplicaCount %v", fb["replicas"], minR, maxR)
	}
}

package ports_test

import (
	"strings"
	"testing"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
	"github.com/notiflow/notiflow/services/scheduler/internal/ports"
)

// TestWebhookURLGuardAtCreation: a webhook target whose URL points at an
// internal address (link-local metadata, private, loopback, or a host name
// resolving only to loopback) is refused with 400 naming webhook_url, on
// the single and bulk create paths; the same URLs are accepted when
// NOTIFLOW_WEBHOOK_ALLOW's entries cover them.
func TestWebhookURLGuardAtCreation(t *testing.T) {
	t.Parallel()
	opts := ports.Options{Token: token, MaxParamsBytes: 1024, MaxBulkBodyBytes: 1 << 16}
	strict := serve(t, domain.Limits{MaxParamsBytes: 1024}, opts)
	allowed := serveAllow(t, domain.Limits{MaxParamsBytes: 1024}, opts,
		[]string{"169.254.169.254", "10.0.0.0/8", "::1", "127.0.0.0/8"})
	tests := []struct {
		url        string
		wantReason string
	}{
		{"http://169.254.169.254/latest/meta-data/", "link-local"},
		{"http://10.1.2.3:8080/hook", "private"},
		{"http://[::1]:9000/hook", "loopback"},
		{"http://localhost:9000/hook", "loopback"}, // resolves to loopback only
	}
	body := func(u string) string {
		return `{"recipient_id":"u1","channel":"webhook","webhook_url":"` + u + `","template_id":"bench","cron":"@daily"}`
	}
	for _, tt := range tests {
		r := strict.call(t, "POST", "/v1/targets", body(tt.url))
		if r.code != 400 || !strings.HasPrefix(r.errMsg(), "webhook_url: ") || !strings.Contains(r.errMsg(), tt.wantReason) ||
			!strings.Contains(r.errMsg(), "NOTIFLOW_WEBHOOK_ALLOW") {
			t.Errorf("%s: %d %s, want 400 webhook_url: ... %s ... NOTIFLOW_WEBHOOK_ALLOW", tt.url, r.code, r.body, tt.wantReason)
		}
		r = strict.call(t, "POST", "/v1/targets:bulk", `{"targets":[`+body("https://example.com/h")+`,`+body(tt.url)+`]}`)
		if r.code != 400 || !strings.HasPrefix(r.errMsg(), "targets[1].webhook_url: ") {
			t.Errorf("bulk %s: %d %s, want 400 targets[1].webhook_url", tt.url, r.code, r.body)
		}
		if r := allowed.call(t, "POST", "/v1/targets", body(tt.url)); r.code != 201 {
			t.Errorf("%s with the allow list: %d %s, want 201", tt.url, r.code, r.body)
		}
	}
	if n := strict.count(t); n != 0 {
		t.Errorf("%d targets stored by the refused requests, want 0", n)
	}
}

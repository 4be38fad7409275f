package ports_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestPatchChecksTemplateParamsAndWebhook: a PATCH that changes a target's
// template, params or webhook URL meets the checks a create meets (the
// template exists and its declared params are given; the webhook host is
// not internal), with the same 400s, and a refused patch changes nothing.
func TestPatchChecksTemplateParamsAndWebhook(t *testing.T) {
	t.Parallel()
	s := newTemplateServer(t)
	if r := s.call(t, "POST", "/v1/templates", `{"name":"ship","channel":"inbox","body":"{{.name}}: {{.carrier}}","params":["name","carrier"]}`); r.code != 201 {
		t.Fatalf("create template: %d %s", r.code, r.body)
	}
	r := s.call(t, "POST", "/v1/targets", `{"recipient_id":"u1","channel":"inbox","template_id":"ship","params":{"name":"a","carrier":"c"},"cron":"@daily"}`)
	if r.code != 201 {
		t.Fatalf("create target: %d %s", r.code, r.body)
	}
	inbox := fmt.Sprintf("/v1/targets/%d", decodeTarget(t, r).ID)
	r = s.call(t, "POST", "/v1/targets", `{"recipient_id":"u2","channel":"webhook","webhook_url":"http://93.184.216.34/hook","template_id":"reminder","params":{"name":"a","what":"b"},"cron":"@daily"}`)
	if r.code != 201 {
		t.Fatalf("create webhook target: %d %s", r.code, r.body)
	}
	hook := fmt.Sprintf("/v1/targets/%d", decodeTarget(t, r).ID)

	tests := []struct {
		path, give, wantMsg string
	}{
		{inbox, `{"params":{"name":"a"}}`, `params: missing carrier, declared by template "ship"`},
		{inbox, `{"template_id":"nope"}`, `template_id: unknown template "nope"`},
		{inbox, `{"template_id":"reminder"}`, `params: missing what, declared by template "reminder"`},
		{hook, `{"webhook_url":"http://169.254.169.254/latest/meta-data/"}`, "webhook_url: "},
		{hook, `{"webhook_url":"http://[::1]:9000/hook"}`, "webhook_url: "},
	}
	for _, tt := range tests {
		before := s.call(t, "GET", tt.path, "")
		r := s.call(t, "PATCH", tt.path, tt.give)
		if r.code != 400 || !strings.HasPrefix(r.errMsg(), tt.wantMsg) {
			t.Errorf("PATCH %s %s: %d %s, want 400 %q...", tt.path, tt.give, r.code, r.body, tt.wantMsg)
		}
		if after := s.call(t, "GET", tt.path, ""); string(after.body) != string(before.body) {
			t.Errorf("refused PATCH %s changed the target:\nbefore %s\nafter  %s", tt.give, before.body, after.body)
		}
	}
	if r := s.call(t, "PATCH", inbox, `{"params":{"name":"b","carrier":"d"}}`); r.code != 200 {
		t.Errorf("PATCH with the declared params: %d %s, want 200", r.code, r.body)
	}
}

package ports_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestTemplateUpdateChecksLiveTargets: a PUT whose new version live
// (active or paused) targets of the template would fail with at send
// time is refused with 409 naming the problem, the count and the first
// ids, and the template stays as it was: declared params a target lacks,
// or a channel binding other than a target's. A done or deleted target
// does not count; once the live target carries the param, the PUT goes
// through.
func TestTemplateUpdateChecksLiveTargets(t *testing.T) {
	t.Parallel()
	s := newTemplateServer(t)
	if r := s.call(t, "POST", "/v1/templates", `{"name":"greet","body":"Hi {{.name}}","params":["name"]}`); r.code != 201 {
		t.Fatalf("create template: %d %s", r.code, r.body)
	}
	create := func(body string) int64 {
		t.Helper()
		r := s.call(t, "POST", "/v1/targets", body)
		if r.code != 201 {
			t.Fatalf("create target: %d %s", r.code, r.body)
		}
		return decodeTarget(t, r).ID
	}
	active := create(`{"recipient_id":"u1","channel":"inbox","template_id":"greet","params":{"name":"a"},"cron":"0 9 * * *"}`)
	paused := create(`{"recipient_id":"u2","channel":"webhook","webhook_url":"https://example.com/h","template_id":"greet","params":{"name":"b"},"cron":"0 9 * * *"}`)
	if r := s.call(t, "POST", fmt.Sprintf("/v1/targets/%d/pause", paused), ""); r.code != 200 {
		t.Fatalf("pause: %d %s", r.code, r.body)
	}
	deleted := create(`{"recipient_id":"u3","channel":"sim","template_id":"greet","params":{"name":"c"},"cron":"0 9 * * *"}`)
	if r := s.call(t, "DELETE", fmt.Sprintf("/v1/targets/%d", deleted), ""); r.code != 204 {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}

	unchanged := func(step string) {
		t.Helper()
		r := s.call(t, "GET", "/v1/templates/greet", "")
		if v := decodeTemplate(t, r); r.code != 200 || v.Version != 1 || v.Body != "Hi {{.name}}" || v.Channel != "" {
			t.Fatalf("%s: the refused update changed the template: %s", step, r.body)
		}
	}
	// A new param both live targets lack (the deleted one is not counted).
	r := s.call(t, "PUT", "/v1/templates/greet", `{"body":"Hi {{.name}} from {{.city}}","params":["name","city"]}`)
	want := fmt.Sprintf(`template "greet" v2 declares params (city, name) that 2 active or paused targets lack (first: %d, %d)`, active, paused)
	if r.code != 409 || !strings.HasPrefix(r.errMsg(), want) || !strings.Contains(r.errMsg(), "give them the params first") {
		t.Fatalf("PUT with a param live targets lack: %d %s, want 409 %q...", r.code, r.body, want)
	}
	unchanged("params")
	// A channel binding the webhook target is not on.
	r = s.call(t, "PUT", "/v1/templates/greet", `{"channel":"inbox","body":"Hi {{.name}}","params":["name"]}`)
	want = fmt.Sprintf(`template "greet" v2 is bound to channel inbox, but 1 active or paused targets use another channel (first: %d)`, paused)
	if r.code != 409 || !strings.HasPrefix(r.errMsg(), want) {
		t.Fatalf("PUT with a channel binding a live target is not on: %d %s, want 409 %q...", r.code, r.body, want)
	}
	unchanged("channel")

	// Once the live targets carry the param, the update goes through.
	for _, id := range []int64{active, paused} {
		if r, _ := s.patch(t, id, `{"params":{"name":"x","city":"Lyon"}}`); r.code != 200 {
			t.Fatalf("patch target %d: %d %s", id, r.code, r.body)
		}
	}
	r = s.call(t, "PUT", "/v1/templates/greet", `{"body":"Hi {{.name}} from {{.city}}","params":["name","city"]}`)
	if r.code != 200 || decodeTemplate(t, r).Version != 2 {
		t.Fatalf("PUT once the targets carry the param: %d %s", r.code, r.body)
	}
}

package ports_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
)

// source is an original record as a dispatcher or sink read it.
func source(topic string, partition int, offset int64, key string, redrives int) kafka.Message {
	hs := kafkax.ContractHeaders("")
	if redrives > 0 {
		hs = kafkax.RedriveHeaders(hs, redrives, "earlier/0/0")
	}
	return kafka.Message{Topic: topic, Partition: partition, Offset: offset, Key: []byte(key), Value: []byte("value of " + key), Headers: hs}
}

func keys(recs any) string {
	var ks []string
	switch rs := recs.(type) {
	case listResp:
		for _, r := range rs.Records {
			ks = append(ks, r.Key)
		}
	case redriveResp:
		for _, r := range rs.Records {
			ks = append(ks, r.Key+":"+r.Action)
		}
	}
	return strings.Join(ks, ",")
}

func q(from, to time.Time, extra ...string) string {
	v := url.Values{"from": {from.Format(time.RFC3339Nano)}, "to": {to.Format(time.RFC3339Nano)}}
	for i := 0; i+1 < len(extra); i += 2 {
		v.Set(extra[i], extra[i+1])
	}
	return v.Encode()
}

// TestListWindowAndFilters writes dead letters in three time slices and
// reads windows of them: a window holds exactly its slice's records, with
// the fields the dead letter's headers carry, filtered by source and
// reason, cut at limit.
func TestListWindowAndFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	t0 := boundary(t)
	e.deadLetter(t, "dispatcher", source(e.due, 2, 40, "a1", 0), "webhook 503 Service Unavailable", 7)
	e.deadLetter(t, "dispatcher", source(e.due, 1, 41, "a2", 0), "template missing", 1)
	t1 := boundary(t)
	e.deadLetter(t, "dispatcher", source(e.due, 0, 50, "b1", 2), "webhook 503 Service Unavailable", 7)
	e.deadLetter(t, "sink", source(e.dispatched, 1, 51, "b2", 0), "poison: cannot decode", 1)
	e.deadLetter(t, "dispatcher", source(e.due, 2, 52, "b3", 0), "webhook 410 Gone", 1)
	t2 := boundary(t)
	e.deadLetter(t, "sink", source(e.dispatched, 0, 60, "c1", 0), "poison: cannot decode", 1)
	t3 := boundary(t)

	if got := keys(e.list(t, q(t0, t1))); got != "a1,a2" {
		t.Errorf("window 1: %s, want a1,a2", got)
	}
	if got := keys(e.list(t, q(t1, t2))); got != "b1,b2,b3" {
		t.Errorf("window 2: %s, want b1,b2,b3", got)
	}
	if got := keys(e.list(t, q(t2, t3))); got != "c1" {
		t.Errorf("window 3: %s, want c1", got)
	}
	if got := keys(e.list(t, q(t0, t3, "source", "sink"))); got != "b2,c1" {
		t.Errorf("source=sink: %s, want b2,c1", got)
	}
	if got := keys(e.list(t, q(t0, t3, "source", "dispatcher", "reason", "503 service"))); got != "a1,b1" {
		t.Errorf("reason=503 service: %s, want a1,b1", got)
	}
	cut := e.list(t, q(t0, t3, "limit", "4"))
	if got := keys(cut); got != "a1,a2,b1,b2" || !cut.More {
		t.Errorf("limit 4: %s more=%v, want a1,a2,b1,b2 more=true", got, cut.More)
	}
	all := e.list(t, q(t0, t3))
	if all.More || len(all.Records) != 6 || all.MaxRedrives != 3 {
		t.Fatalf("whole window: %d records more=%v max=%d", len(all.Records), all.More, all.MaxRedrives)
	}
	b1 := all.Records[2]
	if b1.Source != "dispatcher" || b1.SourceTopic != e.due || b1.SourcePartition != 0 || b1.SourceOffset != 50 ||
		b1.Reason != "webhook 503 Service Unavailable" || b1.Attempts != 7 || b1.RedriveCount != 2 || b1.Redriven ||
		b1.Time.Before(t1) || !b1.Time.Before(t2) {
		t.Errorf("b1 = %+v", b1)
	}
}

// TestBadParams: every bad parameter is a 400 naming it, and both routes
// need the bearer token.
func TestBadParams(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	now := time.Now().UTC().Format(time.RFC3339)
	tests := []struct {
		method, path string
		body         any
		field        string
	}{
		{"GET", "/admin/dlq?from=yesterday", nil, "from:"},
		{"GET", "/admin/dlq?to=2026-13-01T00:00:00Z", nil, "to:"},
		{"GET", "/admin/dlq?from=" + now + "&to=" + now, nil, "to: must be after from"},
		{"GET", "/admin/dlq?source=scheduler", nil, "source:"},
		{"GET", "/admin/dlq?limit=0", nil, "limit:"},
		{"GET", "/admin/dlq?limit=1001", nil, "limit:"},
		{"GET", "/admin/dlq?reason=" + strings.Repeat("x", 201), nil, "reason:"},
		{"GET", "/admin/dlq?form=x", nil, "form: unknown parameter"},
		{"POST", "/admin/dlq/redrive", `{"to":"` + now + `","source":"sink"}`, "from: is required"},
		{"POST", "/admin/dlq/redrive", `{"from":"` + now + `","source":"sink"}`, "to: is required"},
		{"POST", "/admin/dlq/redrive", `{"from":"2026-01-01T00:00:00Z","to":"` + now + `"}`, "source: is required"},
		{"POST", "/admin/dlq/redrive", `{"from":"2026-01-01T00:00:00Z","to":"` + now + `","source":"both"}`, "source: must be"},
		{"POST", "/admin/dlq/redrive", `{"from":"` + now + `","to":"2026-01-01T00:00:00Z","source":"sink"}`, "to: must be after from"},
		{"POST", "/admin/dlq/redrive", `{"from":"soon","to":"` + now + `","source":"sink"}`, "from: must be an RFC 3339 time"},
		{"POST", "/admin/dlq/redrive", `{"from":"2026-01-01T00:00:00Z","to":"` + now + `","source":"sink","dry_run":"yes"}`, "dry_run"},
		{"POST", "/admin/dlq/redrive", `{"from":"2026-01-01T00:00:00Z","to":"` + now + `","source":"sink","window":1}`, "window"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path+" "+fmt.Sprint(tt.body), func(t *testing.T) {
			code, body := e.call(t, tt.method, tt.path, tt.body, nil)
			if code != http.StatusBadRequest || !strings.Contains(body, tt.field) {
				t.Errorf("%d %s, want 400 naming %q", code, body, tt.field)
			}
		})
	}
	for _, r := range []struct{ method, path string }{{"GET", "/admin/dlq"}, {"POST", "/admin/dlq/redrive"}} {
		req, _ := http.NewRequest(r.method, e.url+r.path, strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer wrong")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong token: %d, want 401", r.method, r.path, resp.StatusCode)
		}
	}
}

// TestRedrive: the dry run lists exactly the window's records of the
// source and produces nothing; the real run produces each back to its
// source topic with its key, value and headers and the redrive count
// raised by one, skips the record at the limit, and a second run of the
// same window produces nothing again.
func TestRedrive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	e.deadLetter(t, "dispatcher", source(e.due, 0, 1, "before", 0), "webhook 503", 7)
	t0 := boundary(t)
	e.deadLetter(t, "dispatcher", source(e.due, 0, 2, "d1", 0), "webhook 503", 7)
	e.deadLetter(t, "dispatcher", source(e.due, 1, 3, "d2", 1), "webhook 503", 7)
	e.deadLetter(t, "dispatcher", source(e.due, 2, 4, "tired", 3), "webhook 503", 7)
	e.deadLetter(t, "dispatcher", source(e.due, 2, 5, "d-other", 0), "template missing", 1)
	e.deadLetter(t, "sink", source(e.dispatched, 0, 6, "s1", 0), "poison", 1)
	t1 := boundary(t)
	e.deadLetter(t, "dispatcher", source(e.due, 0, 7, "after", 0), "webhook 503", 7)

	win := redriveReq{From: t0, To: t1, Source: "dispatcher", Reason: "503", DryRun: true}
	dry := e.redrive(t, win)
	if got := keys(dry); got != "d1:redrive,d2:redrive,tired:skipped" || dry.Matched != 3 || dry.Skipped != 1 || dry.Redriven != 0 {
		t.Fatalf("dry run: %s %+v", got, dry)
	}
	if why := dry.Records[2].Why; why != "redrive limit reached (3 of 3)" {
		t.Errorf("skip reason %q", why)
	}
	readN(t, e.brokers, e.due, 3, 0)

	win.DryRun = false
	run := e.redrive(t, win)
	if got := keys(run); got != "d1:redriven,d2:redriven,tired:skipped" || run.Redriven != 2 || run.Skipped != 1 {
		t.Fatalf("redrive: %s %+v", got, run)
	}
	got := map[string]kafka.Message{}
	for _, m := range readN(t, e.brokers, e.due, 3, 2) {
		got[string(m.Key)] = m
	}
	for key, want := range map[string]int{"d1": 1, "d2": 2} {
		m, ok := got[key]
		if !ok {
			t.Fatalf("%s not produced back to %s", key, e.due)
		}
		if string(m.Value) != "value of "+key || string(kafkax.Header(m.Headers, kafkax.HeaderContentType)) != kafkax.ContentTypeProtobuf {
			t.Errorf("%s: value %q headers %v", key, m.Value, m.Headers)
		}
		if c := kafkax.ParseDeadLetter(m.Headers).Redrives; c != want {
			t.Errorf("%s: redrive count %d, want %d", key, c, want)
		}
		for _, h := range m.Headers {
			if strings.HasPrefix(h.Key, "dlq-") {
				t.Errorf("%s carries %s back to its topic", key, h.Key)
			}
		}
	}
	listed := e.list(t, q(t0, t1, "source", "dispatcher", "reason", "503"))
	for _, r := range listed.Records {
		if r.Redriven != (r.Key != "tired") {
			t.Errorf("%s listed with redriven=%v", r.Key, r.Redriven)
		}
	}

	again := e.redrive(t, win)
	if got := keys(again); got != "d1:skipped,d2:skipped,tired:skipped" || again.Redriven != 0 {
		t.Fatalf("second redrive of the window: %s %+v", got, again)
	}
	if why := again.Records[0].Why; why != "already redriven" {
		t.Errorf("second redrive's skip reason %q", why)
	}
	readN(t, e.brokers, e.due, 3, 2)

	sink := e.redrive(t, redriveReq{From: t0, To: t1, Source: "sink"})
	if got := keys(sink); got != "s1:redriven" {
		t.Fatalf("sink redrive: %s", got)
	}
	if m := readN(t, e.brokers, e.dispatched, 3, 1)[0]; string(m.Key) != "s1" {
		t.Errorf("sink record %q on %s", m.Key, e.dispatched)
	}
}

package adapters

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

// The webhook body is byte for byte what encoding/json writes for the
// same values: every single byte, escapes by name, HTML characters, the
// line and paragraph separators, invalid UTF-8 (a lone continuation
// byte, a truncated sequence, a surrogate, an over-long form), and
// random strings built from those pieces.
func TestAppendPayloadIsEncodingJSON(t *testing.T) {
	t.Parallel()
	pieces := []string{"", "a", "hello world", `"`, `\`, "\b\f\n\r\t", "<script>&</script>", "\u2028\u2029",
		"é", "日本語", "😀", "\x80", "\xe6\x97", "\xed\xa0\x80", "\xc0\xaf", "\xff", "\x00", "\x1f", "\x7f", "\u00a0", "\ufffd"}
	for c := range 256 {
		pieces = append(pieces, string([]byte{byte(c)}))
	}
	strs := append([]string(nil), pieces...)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var s string
		for range rng.IntN(6) {
			s += pieces[rng.IntN(len(pieces))]
		}
		strs = append(strs, s)
	}
	at := time.Date(2026, 12, 7, 9, 0, 0, 123456000, time.UTC)
	for i, s := range strs {
		due := &notiflowv1.NotificationDue{NotificationId: s, RecipientId: strs[(i+1)%len(strs)], TemplateId: strs[(i+7)%len(strs)],
			OccurrenceAtUs: at.Add(time.Duration(i) * time.Second).UnixMicro(), Sequence: uint64(i) * 1e15}
		body := strs[(i+13)%len(strs)]
		// The body as encoding/json writes the fields a receiver reads
		// (testkit.Call: the others are not part of the body).
		want, err := json.Marshal(testkit.Call{
			NotificationID: due.NotificationId, RecipientID: due.RecipientId, TemplateID: due.TemplateId, Body: body,
			OccurrenceAt: time.UnixMicro(due.OccurrenceAtUs).UTC().Format(time.RFC3339Nano), Sequence: due.Sequence,
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendPayload(nil, due, body); string(got) != string(want) {
			t.Fatalf("string %q:\n got %s\nwant %s", s, got, want)
		}
	}
}

// An endpoint is parsed once and then shared; a bad URL and a refused
// host say why, and are cached too.
func TestEndpointsCache(t *testing.T) {
	t.Parallel()
	var e endpoints
	checks := 0
	check := func(host string) error {
		checks++
		if host == "10.0.0.1" {
			return errors.New("forbidden address 10.0.0.1")
		}
		return nil
	}
	a := e.get("https://Example.com/hook?x=1", check)
	if a.name != "https://Example.com:443" || a.target != "https://Example.com/hook?x=1" || a.refused != "" {
		t.Fatalf("endpoint %+v", a)
	}
	if b := e.get("https://Example.com/hook?x=1", check); b != a || checks != 1 {
		t.Fatalf("second get: %p vs %p, %d checks; want the same endpoint, one check", b, a, checks)
	}
	if p := e.get("http://[::1]:8080/x", check); p.name != "http://[::1]:8080" {
		t.Errorf("IPv6 endpoint name %q", p.name)
	}
	if bad := e.get("ftp://host/x", check); !strings.HasPrefix(bad.refused, "invalid webhook url") || bad.target != "" {
		t.Errorf("ftp URL: %+v, want invalid", bad)
	}
	if refused := e.get("http://10.0.0.1/x", check); refused.refused != "forbidden address 10.0.0.1" || refused.target != "" {
		t.Errorf("refused host: %+v", refused)
	}
	for i := range maxCachedEndpoints + 1 {
		e.get("http://h"+string(rune('a'+i%26))+"/"+string(rune(i)), check)
	}
	if n := len(e.m); n > maxCachedEndpoints {
		t.Errorf("%d endpoints cached, want at most %d", n, maxCachedEndpoints)
	}
}

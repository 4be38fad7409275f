package adapters

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

// appendPayload appends the webhook body of due with the rendered body,
// a JSON object of notification_id, recipient_id, template_id, body,
// occurrence_at (RFC 3339, UTC, up to nanoseconds) and sequence: the bytes
// Go's default encoding/json Marshal writes for a struct of those fields
// in that order, without its reflection.
func appendPayload(b []byte, due *notiflowv1.NotificationDue, body string) []byte {
	b = append(b, `{"notification_id":`...)
	b = appendJSONString(b, due.NotificationId)
	b = append(b, `,"recipient_id":`...)
	b = appendJSONString(b, due.RecipientId)
	b = append(b, `,"template_id":`...)
	b = appendJSONString(b, due.TemplateId)
	b = append(b, `,"body":`...)
	b = appendJSONString(b, body)
	b = append(b, `,"occurrence_at":"`...)
	b = time.UnixMicro(due.OccurrenceAtUs).UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","sequence":`...)
	b = strconv.AppendUint(b, due.Sequence, 10)
	return append(b, '}')
}

// hexDigits are the digits of appendJSONString's \u00XX escapes.
const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string exactly as Go's default
// encoding/json (v1, not GOEXPERIMENT=jsonv2) encodes a string: '"' and '\\' escaped, \b \f \n \r \t by
// name, other control characters and <, >, & as \u00XX, U+2028 and U+2029
// as \u2028 and \u2029, and each byte of invalid UTF-8 as \ufffd.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// endpoint is what a webhook URL gives every send to it: the URL as
// requests carry it and the breaker's endpoint name (scheme://host:port);
// or, in refused, why it cannot be sent to (a bad URL, a refused host).
type endpoint struct {
	target, name string
	refused      string
}

// maxCachedEndpoints bounds the endpoints cache; when it is full it is
// emptied.
const maxCachedEndpoints = 4096

// endpoints caches the parsing of webhook URLs: a fan-out sends many
// notifications to one URL, which is then parsed once. It holds at most
// maxCachedEndpoints and is emptied when full. It is safe for concurrent
// use.
type endpoints struct {
	mu sync.RWMutex
	m  map[string]*endpoint
}

// get returns the endpoint of raw, parsing it (and checking its host with
// check) the first time.
func (e *endpoints) get(raw string, check func(host string) error) *endpoint {
	e.mu.RLock()
	ep := e.m[raw]
	e.mu.RUnlock()
	if ep != nil {
		return ep
	}
	ep = parseEndpoint(raw, check)
	e.mu.Lock()
	if e.m == nil || len(e.m) >= maxCachedEndpoints {
		e.m = make(map[string]*endpoint)
	}
	e.m[raw] = ep
	e.mu.Unlock()
	return ep
}

// parseEndpoint parses raw (see endpoint).
func parseEndpoint(raw string, check func(host string) error) *endpoint {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return &endpoint{refused: fmt.Sprintf("invalid webhook url %q: want http(s)://host/...", redactURL(raw))}
	}
	if err := check(u.Hostname()); err != nil {
		return &endpoint{refused: err.Error()}
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return &endpoint{target: u.String(), name: u.Scheme + "://" + net.JoinHostPort(u.Hostname(), port)}
}

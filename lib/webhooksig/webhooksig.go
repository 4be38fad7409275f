package webhooksig

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names of the specification.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts every secret.
const SecretPrefix = "whsec_"

// Key sizes: Generate makes KeyBytes bytes; Decode accepts MinKeyBytes to
// MaxKeyBytes (the specification asks for 24 to 64).
const (
	KeyBytes    = 32
	MinKeyBytes = 24
	MaxKeyBytes = 64
)

// ErrBadSecret: a string that is not a whsec_ secret of a valid size.
var ErrBadSecret = errors.New("not a webhook secret (want whsec_ followed by the base64 of 24 to 64 bytes)")

// Generate returns a new secret of KeyBytes random bytes (crypto/rand).
func Generate() (string, error) {
	key := make([]byte, KeyBytes)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("generate webhook secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// Decode returns the key bytes of secret, or an error wrapping ErrBadSecret
// (which never contains the secret).
func Decode(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: missing the whsec_ prefix", ErrBadSecret)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("%w: invalid base64", ErrBadSecret)
	}
	if len(key) < MinKeyBytes || len(key) > MaxKeyBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrBadSecret, len(key))
	}
	return key, nil
}

// Sign returns the webhook-signature value of body sent as message id at
// ts: one "v1,<base64>" signature per key, in the order given, separated
// by spaces. ts is truncated to whole seconds, as the header carries it.
func Sign(keys [][]byte, id string, ts time.Time, body []byte) string {
	prefix := id + "." + strconv.FormatInt(ts.Unix(), 10) + "."
	var b strings.Builder
	for i, key := range keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(prefix))
		mac.Write(body)
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return b.String()
}

// SetHeaders sets the three headers of the specification on h for body
// sent as message id at ts, signed with keys (at least one).
func SetHeaders(h http.Header, keys [][]byte, id string, ts time.Time, body []byte) {
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, Sign(keys, id, ts, body))
}

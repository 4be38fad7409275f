package ports

import (
	"bytes"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"html/template"
	"net/http"
)

//go:embed page.html
var pageHTML string

var pageTemplate = template.Must(template.New("admin").Parse(pageHTML))

// servePage serves the admin page: an HTML shell with no data in it (so it
// needs no token). Its inline script and style carry a fresh nonce and the
// Content-Security-Policy allows nothing else: no other origin, no inline
// handlers. The script keeps the token in sessionStorage, reads it from the
// URL fragment (#token=…, never sent to a server) or the input box, and
// sends it as a bearer token to the JSON routes.
func servePage(w http.ResponseWriter, _ *http.Request) {
	var n [16]byte
	_, _ = rand.Read(n[:])
	nonce := base64.StdEncoding.EncodeToString(n[:])
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, struct{ Nonce string }{nonce}); err != nil {
		http.Error(w, "render admin page", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+nonce+"'; style-src 'nonce-"+nonce+
		"'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	_, _ = w.Write(buf.Bytes())
}

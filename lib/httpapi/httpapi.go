// Package httpapi is the strict JSON request and response handling shared
// by the services' HTTP APIs (the scheduler's targets and admin API, the
// sink's read API): one decoder that refuses what it does not understand
// with a message saying what is wrong, the error shape every route answers
// with, and the Guard that checks the bearer token and maps each route's
// errors to a status and a message.
package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// Error is an error with the status and message the client sees.
type Error struct {
	Status int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// BadRequest returns a 400 Error with a formatted message.
func BadRequest(format string, args ...any) error {
	return &Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf(format, args...)}
}

// Hints add route-specific help to decoding errors: Example follows the
// empty-body message, Fields the unknown-field one. Both may be empty.
type Hints struct {
	Example string
	Fields  string
}

// Decode reads one JSON value of at most limit bytes into v, refusing
// unknown fields, other content types and trailing data. Errors are *Error
// (400, 415) or *http.MaxBytesError for an oversized body.
func Decode(w http.ResponseWriter, r *http.Request, limit int64, v any, h Hints) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return &Error{Status: http.StatusUnsupportedMediaType, Msg: "Content-Type must be application/json"}
		}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, h)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return BadRequest("malformed JSON: unexpected data after the object")
	}
	return nil
}

func decodeError(err error, h Hints) error {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
		mbe *http.MaxBytesError
	)
	switch {
	case errors.As(err, &mbe):
		return err
	case errors.As(err, &syn):
		return BadRequest("malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return BadRequest("body must be a JSON object")
		}
		return BadRequest("%s: must be %s", typ.Field, kindName(typ.Type.Kind().String()))
	case errors.Is(err, io.EOF):
		return BadRequest("empty body: a JSON object is required%s", suffix(", e.g. ", h.Example))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return BadRequest("malformed JSON: unexpected end of body")
	}
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return BadRequest("unknown field %s%s", field, suffix(" (known: ", h.Fields, ")"))
	}
	return BadRequest("malformed JSON: %v", err)
}

func suffix(prefix, s string, end ...string) string {
	if s == "" {
		return ""
	}
	return prefix + s + strings.Join(end, "")
}

func kindName(goKind string) string {
	switch goKind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "ptr":
		return "an integer"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return "a " + goKind
}

// WriteJSON answers with v as JSON and the status code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError answers {"error": msg} with the status code.
func WriteError(w http.ResponseWriter, code int, msg string) {
	WriteJSON(w, code, struct {
		Error string `json:"error"`
	}{msg})
}

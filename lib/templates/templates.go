// Package templates owns the notification template format shared by the
// scheduler and the dispatcher: the template language (Go text/template
// with missingkey=error), the parameters a text refers to, the built-in
// templates, the JSON of a templates file (NOTIFLOW_TEMPLATES_FILE), and a
// managed template (POST /v1/templates) as the scheduler copies it to
// Redis for the dispatchers: its JSON and its key layout. Neither service
// spells these formats itself.
package templates

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
	"unicode/utf8"
)

//go:embed builtin.json
var builtinJSON []byte

// Limits of a managed template's fields.
const (
	MaxNameLen    = 191 // the targets' template_id column
	MaxSubjectLen = 1024
	MaxBodyLen    = 64 << 10
	MaxParams     = 100
	MaxParamLen   = 64
)

// Channels a managed template may be bound to ("" means any).
var Channels = []string{"webhook", "inbox", "sim"}

// Template is a managed template. Its rendered text is Text(); Version
// starts at 1 and grows by one with every update and with its deletion,
// and never restarts for a name (a deleted template is kept as a
// tombstone, Deleted set).
type Template struct {
	Name    string   `json:"name"`
	Channel string   `json:"channel,omitempty"`
	Subject string   `json:"subject,omitempty"`
	Body    string   `json:"body"`
	Params  []string `json:"params"`
	Version int64    `json:"version"`
	Deleted bool     `json:"deleted,omitempty"`
}

// Text is what the dispatcher renders: the body alone, or the subject, a
// blank line and the body when there is a subject.
func (t Template) Text() string {
	if t.Subject == "" {
		return t.Body
	}
	return t.Subject + "\n\n" + t.Body
}

// VersionLabel is the version recorded with each notification rendered
// from t (the notifications' template_version): the decimal version
// number. Built-in and file templates are labelled with a content hash
// instead (16 hex digits), so the two never collide.
func (t Template) VersionLabel() string { return strconv.FormatInt(t.Version, 10) }

// FieldError says which field of a template is wrong and why; Field uses
// the API's JSON names.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Parse parses text as template name, the way the dispatcher renders it.
func Parse(name, text string) (*template.Template, error) {
	return template.New(name).Option("missingkey=error").Parse(text)
}

// Refs returns the parameters a parsed template refers to, sorted: the
// fields of the top-level data ({{.name}}, {{$.name}}, also inside if and
// in the pipelines of range and with). Fields inside range and with
// bodies refer to another value and are not parameters.
func Refs(t *template.Template) []string {
	seen := map[string]bool{}
	for _, tt := range t.Templates() {
		if tt.Tree != nil && tt.Root != nil {
			walk(tt.Root, seen, true)
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

func walk(n parse.Node, seen map[string]bool, top bool) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			walk(c, seen, top)
		}
	case *parse.ActionNode:
		walk(n.Pipe, seen, top)
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, c := range n.Cmds {
			walk(c, seen, top)
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			walk(a, seen, top)
		}
	case *parse.FieldNode:
		if top && len(n.Ident) > 0 {
			seen[n.Ident[0]] = true
		}
	case *parse.ChainNode:
		walk(n.Node, seen, top)
	case *parse.VariableNode:
		if len(n.Ident) > 1 && n.Ident[0] == "$" {
			seen[n.Ident[1]] = true
		}
	case *parse.IfNode:
		walk(n.Pipe, seen, top)
		walk(n.List, seen, top)
		walk(n.ElseList, seen, top)
	case *parse.RangeNode:
		walk(n.Pipe, seen, top)
		walk(n.List, seen, false)
		walk(n.ElseList, seen, top)
	case *parse.WithNode:
		walk(n.Pipe, seen, top)
		walk(n.List, seen, false)
		walk(n.ElseList, seen, top)
	case *parse.TemplateNode:
		walk(n.Pipe, seen, top)
	}
}

// TextRefs parses text and returns the parameters it refers to.
func TextRefs(name, text string) ([]string, error) {
	t, err := Parse(name, text)
	if err != nil {
		return nil, err
	}
	return Refs(t), nil
}

// Check validates a managed template as a client gives it (Version is not
// looked at): the name, the channel, subject and body must parse, and the
// declared params must be exactly the parameters subject and body refer
// to. Errors are *FieldError. It returns t with Params sorted.
func Check(t Template) (Template, error) {
	switch {
	case strings.TrimSpace(t.Name) == "":
		return t, &FieldError{"name", "is required"}
	case len(t.Name) > MaxNameLen:
		return t, &FieldError{"name", fmt.Sprintf("longer than %d bytes", MaxNameLen)}
	case !utf8.ValidString(t.Name) || strings.ContainsAny(t.Name, "/?#%") || strings.TrimSpace(t.Name) != t.Name:
		return t, &FieldError{"name", "must be valid UTF-8 without /, ?, #, % or surrounding spaces"}
	case t.Channel != "" && !slices.Contains(Channels, t.Channel):
		return t, &FieldError{"channel", fmt.Sprintf("unknown channel %q (want webhook, inbox, sim, or none for any)", t.Channel)}
	case len(t.Subject) > MaxSubjectLen:
		return t, &FieldError{"subject", fmt.Sprintf("longer than %d bytes", MaxSubjectLen)}
	case strings.TrimSpace(t.Body) == "":
		return t, &FieldError{"body", "is required"}
	case len(t.Body) > MaxBodyLen:
		return t, &FieldError{"body", fmt.Sprintf("longer than %d bytes", MaxBodyLen)}
	case len(t.Params) > MaxParams:
		return t, &FieldError{"params", fmt.Sprintf("more than %d parameters", MaxParams)}
	}
	declared := map[string]bool{}
	for _, p := range t.Params {
		switch {
		case p == "" || len(p) > MaxParamLen || !isIdent(p):
			return t, &FieldError{"params", fmt.Sprintf("%q is not a parameter name (letters, digits and _, at most %d bytes, not starting with a digit)", p, MaxParamLen)}
		case declared[p]:
			return t, &FieldError{"params", fmt.Sprintf("%q is declared twice", p)}
		}
		declared[p] = true
	}
	used := map[string]bool{}
	for _, f := range []struct{ field, text string }{{"subject", t.Subject}, {"body", t.Body}} {
		if f.text == "" {
			continue
		}
		refs, err := TextRefs(t.Name, f.text)
		if err != nil {
			return t, &FieldError{f.field, "does not parse as a Go text/template: " + err.Error()}
		}
		for _, r := range refs {
			if !declared[r] {
				return t, &FieldError{"params", fmt.Sprintf("%s refers to {{.%s}}, which is not declared", f.field, r)}
			}
			used[r] = true
		}
	}
	var unused []string
	for _, p := range t.Params {
		if !used[p] {
			unused = append(unused, p)
		}
	}
	if len(unused) > 0 {
		return t, &FieldError{"params", "declared but not used by subject or body: " + strings.Join(unused, ", ")}
	}
	t.Params = slices.Sorted(slices.Values(t.Params))
	if t.Params == nil {
		t.Params = []string{}
	}
	return t, nil
}

func isIdent(s string) bool {
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// Builtin returns the built-in template texts by id.
func Builtin() map[string]string {
	m, err := ParseFile(builtinJSON)
	if err != nil {
		// The embedded file is part of the build and covered by tests.
		return map[string]string{}
	}
	return m
}

// ParseFile reads a templates file: a JSON object mapping template id to
// template text.
func ParseFile(data []byte) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf(`want a JSON object {"template id": "template text"}: %w`, err)
	}
	return m, nil
}

// Missing returns the declared parameters that the JSON object params
// (empty or null: none) has no member for, sorted.
func Missing(declared []string, params []byte) ([]string, error) {
	var m map[string]json.RawMessage
	if p := strings.TrimSpace(string(params)); p != "" && p != "null" {
		if err := json.Unmarshal(params, &m); err != nil {
			return nil, fmt.Errorf("params are not a JSON object: %w", err)
		}
	}
	var missing []string
	for _, d := range declared {
		if _, ok := m[d]; !ok {
			missing = append(missing, d)
		}
	}
	slices.Sort(missing)
	return missing, nil
}

package domain

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"
)

//go:embed builtin_templates.json
var builtinJSON []byte

// ErrUnknownTemplate marks a notification whose template id is not known.
var ErrUnknownTemplate = errors.New("unknown template")

// ErrRender marks a template that failed to render with the given params.
var ErrRender = errors.New("render template")

// Templates is a parsed, immutable set of notification templates
// (text/template). It is safe for concurrent use.
type Templates struct {
	set map[string]*compiled
}

type compiled struct {
	t *template.Template
	// static is set when the template has no actions: rendering it needs
	// no params, so the params JSON is not even decoded.
	static   bool
	constant string
}

// BuiltinTemplates returns the built-in template texts by id.
func BuiltinTemplates() map[string]string {
	m, err := ParseTemplateJSON(builtinJSON)
	if err != nil {
		// The embedded file is part of the build and covered by tests.
		return map[string]string{}
	}
	return m
}

// ParseTemplateJSON reads a JSON object mapping template id to template
// text.
func ParseTemplateJSON(data []byte) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf(`want a JSON object {"template id": "template text"}: %w`, err)
	}
	return m, nil
}

// NewTemplates parses the built-in templates overlaid with extra (extra wins
// on the same id). Every template is parsed here, once; the error names the
// first template that does not parse.
func NewTemplates(extra map[string]string) (*Templates, error) {
	texts := BuiltinTemplates()
	maps.Copy(texts, extra)
	t := &Templates{set: make(map[string]*compiled, len(texts))}
	for _, id := range slices.Sorted(maps.Keys(texts)) {
		if strings.TrimSpace(id) == "" {
			return nil, errors.New("template with an empty id")
		}
		tpl, err := template.New(id).Option("missingkey=error").Parse(texts[id])
		if err != nil {
			return nil, fmt.Errorf("template %q: %w", id, err)
		}
		c := &compiled{t: tpl}
		if s, ok := constantText(tpl); ok {
			c.static, c.constant = true, s
		}
		t.set[id] = c
	}
	return t, nil
}

// constantText reports whether tpl is plain text and returns that text.
func constantText(tpl *template.Template) (string, bool) {
	if tpl.Tree == nil || tpl.Root == nil {
		return "", true
	}
	var b strings.Builder
	for _, n := range tpl.Root.Nodes {
		tn, ok := n.(*parse.TextNode)
		if !ok {
			return "", false
		}
		b.Write(tn.Text)
	}
	return b.String(), true
}

// IDs returns the known template ids, sorted.
func (t *Templates) IDs() []string { return slices.Sorted(maps.Keys(t.set)) }

// Render renders template id with params, a JSON object (empty or null
// means no params). Errors wrap ErrUnknownTemplate or ErrRender and say why.
func (t *Templates) Render(id string, params []byte) (string, error) {
	c, ok := t.set[id]
	if !ok {
		return "", fmt.Errorf("%w %q", ErrUnknownTemplate, id)
	}
	if c.static {
		return c.constant, nil
	}
	data := map[string]any{}
	if p := bytes.TrimSpace(params); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		dec := json.NewDecoder(bytes.NewReader(p))
		dec.UseNumber()
		if err := dec.Decode(&data); err != nil {
			return "", fmt.Errorf("%w %q: params are not a JSON object: %v", ErrRender, id, err)
		}
	}
	var b strings.Builder
	if err := c.t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("%w %q: %v", ErrRender, id, err)
	}
	return b.String(), nil
}

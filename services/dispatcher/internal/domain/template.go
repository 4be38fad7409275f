package domain

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"
	"unicode/utf8"

	"github.com/notiflow/notiflow/lib/templates"
)

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
	// version labels the text: a content hash for built-in and file
	// templates (Version), the version number for managed ones.
	version string
	// static is set when the template has no actions: rendering it needs
	// no params, so the params JSON is not even decoded.
	static   bool
	constant string
	// parts is set when the template is only text and {{.field}}
	// actions (the common case): it is then rendered without reflection.
	parts  []part
	fields []string // distinct fields the parts refer to
}

// part is a piece of a simple template: literal text, or a param.
type part struct {
	text  string
	field string
	index int // of field in compiled.fields
}

// BuiltinTemplates returns the built-in template texts by id
// (templates.Builtin).
func BuiltinTemplates() map[string]string { return templates.Builtin() }

// ParseTemplateJSON reads a templates file (templates.ParseFile).
func ParseTemplateJSON(data []byte) (map[string]string, error) { return templates.ParseFile(data) }

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
		sum := sha256.Sum256([]byte(texts[id]))
		c, err := compile(id, texts[id], hex.EncodeToString(sum[:8]))
		if err != nil {
			return nil, err
		}
		t.set[id] = c
	}
	return t, nil
}

// Parsed is one parsed template with its version. It is immutable and
// safe for concurrent use.
type Parsed struct{ c *compiled }

// ParseTemplate parses text as template id with version (a managed
// template's templates.Template.VersionLabel).
func ParseTemplate(id, text, version string) (*Parsed, error) {
	c, err := compile(id, text, version)
	if err != nil {
		return nil, err
	}
	return &Parsed{c: c}, nil
}

// Version is the version the template was parsed with.
func (p *Parsed) Version() string { return p.c.version }

// Render renders the template with params as Templates.Render does.
func (p *Parsed) Render(params []byte) (string, error) { return p.c.execute(p.c.t.Name(), params) }

func compile(id, text, version string) (*compiled, error) {
	tpl, err := templates.Parse(id, text)
	if err != nil {
		return nil, fmt.Errorf("template %q: %w", id, err)
	}
	c := &compiled{t: tpl, version: version}
	if s, ok := constantText(tpl); ok {
		c.static, c.constant = true, s
		return c, nil
	}
	c.parts = simpleParts(tpl)
	for i, p := range c.parts {
		if p.field == "" {
			continue
		}
		j := slices.Index(c.fields, p.field)
		if j < 0 {
			j = len(c.fields)
			c.fields = append(c.fields, p.field)
		}
		c.parts[i].index = j
	}
	return c, nil
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

// simpleParts splits a template made only of text and {{.field}} actions
// into parts; nil when it uses anything else.
func simpleParts(tpl *template.Template) []part {
	var parts []part
	for _, n := range tpl.Root.Nodes {
		switch n := n.(type) {
		case *parse.TextNode:
			parts = append(parts, part{text: string(n.Text)})
		case *parse.ActionNode:
			p := n.Pipe
			if len(p.Decl) != 0 || len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
				return nil
			}
			f, ok := p.Cmds[0].Args[0].(*parse.FieldNode)
			if !ok || len(f.Ident) != 1 {
				return nil
			}
			parts = append(parts, part{field: f.Ident[0]})
		default:
			return nil
		}
	}
	return parts
}

// Version returns the version of template id: the first 8 bytes of the
// SHA-256 of its text, in hex (16 characters), so that an edited template
// gets a new version and the same text the same version on every replica;
// "" for an unknown id.
func (t *Templates) Version(id string) string {
	if c, ok := t.set[id]; ok {
		return c.version
	}
	return ""
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
	return c.execute(id, params)
}

// Has reports whether id is one of the set's templates.
func (t *Templates) Has(id string) bool {
	_, ok := t.set[id]
	return ok
}

func (c *compiled) execute(id string, params []byte) (string, error) {
	if c.static {
		return c.constant, nil
	}
	if c.parts != nil {
		if out, ok, err := c.renderSimple(id, params); ok {
			return out, err
		}
	}
	return c.render(id, params)
}

// renderSimple renders a simple template with string, number and boolean
// params, printed as text/template would print them. ok is false when a
// param is of another kind (null, object, array): the caller then takes
// the general path.
func (c *compiled) renderSimple(id string, params []byte) (string, bool, error) {
	values := make([][]byte, len(c.fields))
	if p := bytes.TrimSpace(params); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		if !json.Valid(p) || p[0] != '{' {
			var v map[string]any
			err := json.Unmarshal(p, &v)
			return "", true, fmt.Errorf("%w %q: params are not a JSON object: %v", ErrRender, id, err)
		}
		scanObject(p, func(key, val []byte) {
			if bytes.IndexByte(key, '\\') >= 0 {
				var k string
				if json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &k) != nil {
					return
				}
				key = []byte(k)
			}
			for i, f := range c.fields {
				if string(key) == f {
					values[i] = val
				}
			}
		})
	}
	var b strings.Builder
	for _, pt := range c.parts {
		if pt.field == "" {
			b.WriteString(pt.text)
			continue
		}
		v := values[pt.index]
		if v == nil {
			return "", true, fmt.Errorf("%w %q: map has no entry for key %q", ErrRender, id, pt.field)
		}
		switch v[0] {
		case '"':
			if bytes.IndexByte(v, '\\') < 0 && utf8.Valid(v) {
				b.Write(v[1 : len(v)-1])
				continue
			}
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return "", false, nil
			}
			b.WriteString(s)
		case 't', 'f', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			b.Write(v) // numbers keep their exact text, like json.Number
		default:
			return "", false, nil
		}
	}
	return b.String(), true, nil
}

// render is the general path: decode params, execute the template.
func (c *compiled) render(id string, params []byte) (string, error) {
	data := map[string]any{}
	if p := bytes.TrimSpace(params); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		dec := json.NewDecoder(bytes.NewReader(p))
		dec.UseNumber()
		if err := dec.Decode(&data); err != nil {
			return "", fmt.Errorf("%w %q: params are not a JSON object: %v", ErrRender, id, err)
		}
		if dec.InputOffset() != int64(len(p)) {
			return "", fmt.Errorf("%w %q: params are not a JSON object: data after the object", ErrRender, id)
		}
	}
	var b strings.Builder
	if err := c.t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("%w %q: %v", ErrRender, id, err)
	}
	return b.String(), nil
}

// scanObject calls fn with the raw key (without quotes, escapes kept) and
// the raw value of every member of the JSON object p, which must be valid
// JSON (json.Valid) starting with '{'. Nested values are passed whole.
func scanObject(p []byte, fn func(key, val []byte)) {
	i := skipSpace(p, 1)
	for i < len(p) && p[i] != '}' {
		kEnd := endOfString(p, i)
		key := p[i+1 : kEnd-1]
		i = skipSpace(p, kEnd) + 1 // ':'
		i = skipSpace(p, i)
		vEnd := endOfValue(p, i)
		fn(key, p[i:vEnd])
		i = skipSpace(p, vEnd)
		if i < len(p) && p[i] == ',' {
			i = skipSpace(p, i+1)
		}
	}
}

func skipSpace(p []byte, i int) int {
	for i < len(p) && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r') {
		i++
	}
	return i
}

// endOfString returns the index after the string starting at p[i] == '"'.
func endOfString(p []byte, i int) int {
	for j := i + 1; j < len(p); j++ {
		switch p[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(p)
}

// endOfValue returns the index after the value starting at p[i].
func endOfValue(p []byte, i int) int {
	switch p[i] {
	case '"':
		return endOfString(p, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(p); j++ {
			switch p[j] {
			case '"':
				j = endOfString(p, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(p)
	}
	j := i
	for j < len(p) && p[j] != ',' && p[j] != '}' && p[j] != ']' && p[j] != ' ' && p[j] != '\t' && p[j] != '\n' && p[j] != '\r' {
		j++
	}
	return j
}

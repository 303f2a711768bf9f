package spec

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// parser decodes an extension value, collecting every error.
type parser struct {
	errs []FieldError
}

func (p *parser) errorf(field, format string, args ...any) {
	p.errs = append(p.errs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64, int, int64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// object checks that v is an object with only the allowed fields.
func (p *parser) object(field string, v any, allowed ...string) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		p.errorf(field, "got %s; want an object", typeName(v))
		return nil, false
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		found := false
		for _, a := range allowed {
			if k == a {
				found = true
			}
		}
		if !found {
			p.errorf(field+"."+k, "unknown field; allowed fields are %s", strings.Join(allowed, ", "))
		}
	}
	return m, true
}

// section returns m's member name (an object with only the allowed
// fields), or false when it is absent or not such an object.
func (p *parser) section(m map[string]any, name string, allowed ...string) (map[string]any, bool) {
	v, ok := m[name]
	if !ok {
		return nil, false
	}
	return p.object(ExtensionName+"."+name, v, allowed...)
}

// headerNames decodes a list of header names; refuse, if not nil, says why
// a valid name is not allowed ("" to allow it).
func (p *parser) headerNames(field string, v any, refuse func(string) string) ([]string, bool) {
	l, ok := p.strings(field, v)
	if !ok {
		return nil, false
	}
	for i, h := range l {
		f := fmt.Sprintf("%s[%d]", field, i)
		if !idemtype.ValidHeaderName(h) {
			p.errorf(f, "%q is not a valid header name", h)
		} else if refuse != nil {
			if why := refuse(h); why != "" {
				p.errorf(f, "%s", why)
			}
		}
	}
	return l, true
}

func (p *parser) str(field string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		p.errorf(field, "got %s; want a string", typeName(v))
	}
	return s, ok
}

func (p *parser) boolean(field string, v any) (bool, bool) {
	b, ok := v.(bool)
	if !ok {
		p.errorf(field, "got %s; want true or false", typeName(v))
	}
	return b, ok
}

func (p *parser) integer(field string, v any, min, max int) (int, bool) {
	f, ok := v.(float64)
	if !ok || f != float64(int(f)) {
		p.errorf(field, "got %s; want a whole number", describe(v))
		return 0, false
	}
	if int(f) < min || int(f) > max {
		p.errorf(field, "got %d; want a number from %d to %d", int(f), min, max)
		return 0, false
	}
	return int(f), true
}

func (p *parser) strings(field string, v any) ([]string, bool) {
	l, ok := v.([]any)
	if !ok {
		p.errorf(field, "got %s; want a list of strings", typeName(v))
		return nil, false
	}
	out := make([]string, 0, len(l))
	for i, el := range l {
		if s, ok := p.str(fmt.Sprintf("%s[%d]", field, i), el); ok {
			out = append(out, s)
		}
	}
	return out, len(out) == len(l)
}

func (p *parser) duration(field string, v any) (time.Duration, bool) {
	s, ok := v.(string)
	if !ok {
		p.errorf(field, "got %s; want a duration string such as 30s, 15m or 24h", describe(v))
		return 0, false
	}
	d, err := parseDuration(s)
	if err != nil || d <= 0 {
		p.errorf(field, "%q is not a positive duration; use a number and a unit: s, m, h or d (e.g. 30s, 24h, 7d)", s)
		return 0, false
	}
	return d, true
}

// parseDuration accepts Go durations and a days suffix ("7d").
func parseDuration(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok && !strings.ContainsAny(n, "hmsuµn") {
		d, err := time.ParseDuration(n + "h")
		return d * 24, err
	}
	return time.ParseDuration(s)
}

func describe(v any) string {
	switch t := v.(type) {
	case string:
		return fmt.Sprintf("%q", t)
	case float64:
		return fmt.Sprintf("%v", t)
	}
	return typeName(v)
}

// choice returns the value of m's member name (parent.name in errors)
// when it is one of allowed; otherwise, or when it is absent, current.
func choice[T ~string](p *parser, m map[string]any, parent, name string, current T, allowed ...T) T {
	v, ok := m[name]
	if !ok {
		return current
	}
	field := parent + "." + name
	s, ok := p.str(field, v)
	if !ok {
		return current
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		if s == string(a) {
			return a
		}
		names[i] = string(a)
	}
	p.errorf(field, "%q is not allowed; use one of %s", s, strings.Join(names, ", "))
	return current
}

// Package spec is the x-idempotency OpenAPI extension: its Go model, its
// defaults, and its validation with errors that name the file, the
// operation, the field, the bad value and what is allowed.
package spec

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// ExtensionName is the OpenAPI extension this package reads.
const ExtensionName = "x-idempotency"

// Extension is one operation's x-idempotency object, with defaults applied.
type Extension struct {
	Key         Key
	Scope       Scope
	Group       string // operations sharing one key namespace; "" for none
	Retention   time.Duration
	Lease       time.Duration
	Fingerprint Fingerprint
	Replay      Replay
	Ambiguous   string // resume | store
	Complete    string // on-retry | background
	Phases      []Phase
}

// Key is where the key comes from and what it may look like: a request
// header, or a member of the JSON request body (a webhook's event id).
type Key struct {
	Header    string // the request header carrying the key; "" when Pointer is set
	Pointer   string // a JSON Pointer into the JSON request body; "" for a header key
	Required  bool   // always true for a body key
	MaxLength int
	Format    string // any | uuid
}

// Source says where the key comes from, e.g. "header Idempotency-Key" or
// "pointer /id".
func (k Key) Source() string {
	if k.Pointer != "" {
		return "pointer " + k.Pointer
	}
	return "header " + k.Header
}

// Scope is what keys are unique within (besides the operation or group).
type Scope struct {
	Kind   string // principal | header | global | sender
	Header string // for Kind header
	Sender string // for Kind sender: the name of the runtime's verifier
}

// String returns the scope as written in the extension.
func (s Scope) String() string {
	switch s.Kind {
	case "header":
		return "header:" + s.Header
	case "sender":
		return "sender:" + s.Sender
	}
	return s.Kind
}

// Fingerprint says what request identity leaves out or adds.
type Fingerprint struct {
	Exclude []string // JSON Pointers into the body
	Headers []string // request headers that are part of identity
}

// Replay says what of a response is stored.
type Replay struct {
	Headers      []string
	MaxBodyBytes int
}

// Phase is one step of the operation.
type Phase struct {
	Name    string
	Foreign bool
}

// Defaults, as documented in docs/extension.md.
const (
	DefaultHeader       = "Idempotency-Key"
	DefaultMaxLength    = 255
	DefaultRetention    = 24 * time.Hour
	DefaultLease        = 30 * time.Second
	DefaultMaxBodyBytes = 65536
	DefaultPhase        = "execute"
)

// DefaultReplayHeaders are stored with a response unless replay.headers is set.
var DefaultReplayHeaders = []string{"Content-Type", "Location"}

// Default returns the extension that `x-idempotency: true` means.
func Default() *Extension {
	return &Extension{
		Key:       Key{Header: DefaultHeader, Required: true, MaxLength: DefaultMaxLength, Format: "any"},
		Scope:     Scope{Kind: "principal"},
		Retention: DefaultRetention,
		Lease:     DefaultLease,
		Replay:    Replay{Headers: append([]string(nil), DefaultReplayHeaders...), MaxBodyBytes: DefaultMaxBodyBytes},
		Ambiguous: "resume",
		Complete:  "on-retry",
		Phases:    []Phase{{Name: DefaultPhase}},
	}
}

var (
	phaseNameRE  = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
	groupRE      = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,62}$`) // also sender names
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// never lists response headers that are never stored, whatever replay.headers says.
var never = map[string]bool{"set-cookie": true, "authorization": true, "proxy-authorization": true,
	"www-authenticate": true, "proxy-authenticate": true, "cookie": true}

// framing lists the headers that frame a body on the wire; the server sets
// them for each response, so a stored copy would contradict the body sent.
var framing = map[string]bool{"content-length": true, "transfer-encoding": true, "content-encoding": true}

// FieldError is one problem with one field of an extension.
type FieldError struct {
	Field   string // e.g. "x-idempotency.phases[2].foreign"
	Message string // what is wrong and what is allowed
}

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

func (p *parser) oneOf(field, got string, allowed ...string) bool {
	for _, a := range allowed {
		if got == a {
			return true
		}
	}
	p.errorf(field, "%q is not allowed; use one of %s", got, strings.Join(allowed, ", "))
	return false
}

// Parse decodes the value of an x-idempotency extension (true, false, or
// an object, as decoded from JSON or YAML). It returns nil for false. Every
// problem is reported, not only the first.
func Parse(v any) (*Extension, []FieldError) {
	const root = ExtensionName
	p := &parser{}
	switch t := v.(type) {
	case bool:
		if !t {
			return nil, nil
		}
		return Default(), nil
	case map[string]any:
	default:
		p.errorf(root, "got %s; want true, false or an object", typeName(v))
		return nil, p.errs
	}
	x := Default()
	m, _ := p.object(root, v, "key", "scope", "group", "retention", "lease", "fingerprint", "replay", "ambiguous", "complete", "phases")
	if kv, ok := m["key"]; ok {
		if km, ok := p.object(root+".key", kv, "header", "pointer", "required", "maxLength", "format"); ok {
			if h, ok := km["header"]; ok {
				if s, ok := p.str(root+".key.header", h); ok {
					if !headerNameRE.MatchString(s) {
						p.errorf(root+".key.header", "%q is not a valid header name", s)
					} else {
						x.Key.Header = s
					}
				}
			}
			if pv, ok := km["pointer"]; ok {
				if s, ok := p.str(root+".key.pointer", pv); ok {
					_, both := km["header"]
					switch {
					case !strings.HasPrefix(s, "/"):
						p.errorf(root+".key.pointer", "%q is not a JSON Pointer; it must start with / (e.g. /id)", s)
					case both:
						p.errorf(root+".key.pointer", "key.header and key.pointer exclude each other: a key comes from a header or from the body, not both")
					default:
						x.Key.Pointer, x.Key.Header = s, ""
					}
				}
			}
			if r, ok := km["required"]; ok {
				if b, ok := p.boolean(root+".key.required", r); ok {
					if !b && x.Key.Pointer != "" {
						p.errorf(root+".key.required", "a key in the body is always required: key.pointer must name a member the body schema requires; remove required: false")
					} else {
						x.Key.Required = b
					}
				}
			}
			if ml, ok := km["maxLength"]; ok {
				if n, ok := p.integer(root+".key.maxLength", ml, 1, 8192); ok {
					x.Key.MaxLength = n
				}
			}
			if f, ok := km["format"]; ok {
				if s, ok := p.str(root+".key.format", f); ok && p.oneOf(root+".key.format", s, "any", "uuid") {
					x.Key.Format = s
				}
			}
		}
	}
	if sv, ok := m["scope"]; ok {
		if s, ok := p.str(root+".scope", sv); ok {
			switch {
			case s == "principal" || s == "global":
				x.Scope = Scope{Kind: s}
			case strings.HasPrefix(s, "header:") && headerNameRE.MatchString(strings.TrimPrefix(s, "header:")):
				x.Scope = Scope{Kind: "header", Header: strings.TrimPrefix(s, "header:")}
			case strings.HasPrefix(s, "sender:") && groupRE.MatchString(strings.TrimPrefix(s, "sender:")):
				x.Scope = Scope{Kind: "sender", Sender: strings.TrimPrefix(s, "sender:")}
			default:
				p.errorf(root+".scope", "%q is not a scope; use principal, global, header:<Header-Name> or sender:<name>", s)
			}
		}
	}
	if gv, ok := m["group"]; ok {
		if s, ok := p.str(root+".group", gv); ok {
			if groupRE.MatchString(s) {
				x.Group = s
			} else {
				p.errorf(root+".group", "%q is not a group name; use letters, digits, _ . - (starting with a letter, at most 63)", s)
			}
		}
	}
	retentionSet, leaseSet := true, true
	if rv, ok := m["retention"]; ok {
		x.Retention, retentionSet = p.duration(root+".retention", rv)
	}
	if lv, ok := m["lease"]; ok {
		x.Lease, leaseSet = p.duration(root+".lease", lv)
		if leaseSet && x.Lease < time.Second {
			p.errorf(root+".lease", "%v is shorter than 1s; leases are renewed every third of their length", x.Lease)
		}
	}
	if retentionSet && leaseSet && x.Retention <= x.Lease {
		p.errorf(root+".retention", "%v must be longer than lease %v: a key must outlive every claim on it", x.Retention, x.Lease)
	}
	if fv, ok := m["fingerprint"]; ok {
		if fm, ok := p.object(root+".fingerprint", fv, "exclude", "headers"); ok {
			if ev, ok := fm["exclude"]; ok {
				if l, ok := p.strings(root+".fingerprint.exclude", ev); ok {
					for i, ptr := range l {
						if !strings.HasPrefix(ptr, "/") {
							p.errorf(fmt.Sprintf("%s.fingerprint.exclude[%d]", root, i), "%q is not a JSON Pointer; it must start with / (e.g. /client_ts)", ptr)
						}
					}
					x.Fingerprint.Exclude = l
				}
			}
			if hv, ok := fm["headers"]; ok {
				if l, ok := p.strings(root+".fingerprint.headers", hv); ok {
					for i, h := range l {
						if !headerNameRE.MatchString(h) {
							p.errorf(fmt.Sprintf("%s.fingerprint.headers[%d]", root, i), "%q is not a valid header name", h)
						}
					}
					x.Fingerprint.Headers = l
				}
			}
		}
	}
	if rv, ok := m["replay"]; ok {
		if rm, ok := p.object(root+".replay", rv, "headers", "maxBodyBytes"); ok {
			if hv, ok := rm["headers"]; ok {
				if l, ok := p.strings(root+".replay.headers", hv); ok {
					for i, h := range l {
						f := fmt.Sprintf("%s.replay.headers[%d]", root, i)
						switch {
						case !headerNameRE.MatchString(h):
							p.errorf(f, "%q is not a valid header name", h)
						case never[strings.ToLower(h)]:
							p.errorf(f, "%s is never stored: it carries credentials or per-client state", h)
						case framing[strings.ToLower(h)]:
							p.errorf(f, "%s is never stored: it frames the body on the wire, and the server sets it for each response", h)
						}
					}
					x.Replay.Headers = l
				}
			}
			if bv, ok := rm["maxBodyBytes"]; ok {
				if n, ok := p.integer(root+".replay.maxBodyBytes", bv, 1, 64<<20); ok {
					x.Replay.MaxBodyBytes = n
				}
			}
		}
	}
	if av, ok := m["ambiguous"]; ok {
		if s, ok := p.str(root+".ambiguous", av); ok && p.oneOf(root+".ambiguous", s, "resume", "store") {
			x.Ambiguous = s
		}
	}
	if cv, ok := m["complete"]; ok {
		if s, ok := p.str(root+".complete", cv); ok && p.oneOf(root+".complete", s, "on-retry", "background") {
			x.Complete = s
		}
	}
	if pv, ok := m["phases"]; ok {
		x.Phases = p.phases(root+".phases", pv)
	}
	return x, p.errs
}

func (p *parser) phases(field string, v any) []Phase {
	l, ok := v.([]any)
	if !ok || len(l) == 0 {
		p.errorf(field, "got %s; want a non-empty list of phases", typeName(v))
		return []Phase{{Name: DefaultPhase}}
	}
	var out []Phase
	seen := map[string]int{}
	for i, el := range l {
		f := fmt.Sprintf("%s[%d]", field, i)
		var ph Phase
		switch t := el.(type) {
		case string:
			ph.Name = t
		default:
			pm, ok := p.object(f, el, "name", "foreign")
			if !ok {
				continue
			}
			if nv, ok := pm["name"]; ok {
				ph.Name, _ = p.str(f+".name", nv)
			} else {
				p.errorf(f+".name", "missing; every phase needs a name")
				continue
			}
			if fv, ok := pm["foreign"]; ok {
				ph.Foreign, _ = p.boolean(f+".foreign", fv)
			}
		}
		switch {
		case !phaseNameRE.MatchString(ph.Name):
			p.errorf(f+".name", "%q is not a phase name; use snake_case: a lowercase letter, then lowercase letters, digits or _", ph.Name)
		case seen[ph.Name] > 0:
			p.errorf(f+".name", "%q repeats the name of phases[%d]; phase names must be unique", ph.Name, seen[ph.Name]-1)
		}
		seen[ph.Name] = i + 1
		out = append(out, ph)
	}
	if n := len(out); n > 0 && out[n-1].Foreign {
		p.errorf(fmt.Sprintf("%s[%d].foreign", field, len(l)-1), "the last phase cannot be foreign: it must commit the response in a transaction; add a local phase after %q", out[n-1].Name)
	}
	if len(out) == 0 {
		out = []Phase{{Name: DefaultPhase}}
	}
	return out
}

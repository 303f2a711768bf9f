package spec

import (
	"fmt"
	"regexp"
	"time"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

var phaseNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// neverStored says why a response header is never stored, or "".
func neverStored(h string) string {
	switch {
	case idemtype.CredentialHeader(h):
		return h + " is never stored: it carries credentials or per-client state"
	case idemtype.FramingHeader(h):
		return h + " is never stored: it frames the body on the wire, and the server sets it for each response"
	}
	return ""
}

// FieldError is one problem with one field of an extension.
type FieldError struct {
	Field   string // e.g. "x-idempotency.phases[2].foreign"
	Message string // what is wrong and what is allowed
}

// Parse decodes the value of an x-idempotency extension (true, false, or
// an object, as decoded from JSON or YAML). It returns nil for false. Every
// problem is reported, not only the first.
func Parse(v any) (*Extension, []FieldError) {
	p := &parser{}
	switch t := v.(type) {
	case bool:
		if !t {
			return nil, nil
		}
		return Default(), nil
	case map[string]any:
	default:
		p.errorf(ExtensionName, "got %s; want true, false or an object", typeName(v))
		return nil, p.errs
	}
	x := Default()
	m, _ := p.object(ExtensionName, v, "key", "scope", "placement", "natural-key", "group", "retention", "lease", "wait", "fingerprint", "request", "replay", "ambiguous", "complete", "phases", "handler")
	p.key(&x.Key, m)
	p.scope(&x.Scope, m)
	p.placement(&x.Placement, m)
	p.naturalKey(&x.NaturalKey, m)
	p.group(&x.Group, m)
	p.lifetimes(x, m)
	p.wait(x, m)
	p.fingerprint(&x.Fingerprint, m)
	p.request(&x.Request, m)
	p.replay(&x.Replay, m)
	p.modes(x, m)
	if v, ok := m["phases"]; ok {
		x.Phases = p.phases(ExtensionName+".phases", v)
	}
	if v, ok := m["handler"]; ok {
		x.Handler, _ = p.boolean(ExtensionName+".handler", v)
		_, phases := m["phases"]
		switch {
		case x.Handler && phases:
			p.errorf(ExtensionName+".handler", "true, with phases: an operation is served by its strict handler or by phases, not both; drop one")
		case x.Handler && len(x.Replay.Render) > 0:
			p.errorf(ExtensionName+".replay.render", "set, with handler: true: a kept handler has no render method to replay with; use phases")
		case x.Handler && x.Complete == idemtype.CompleteBackground:
			p.errorf(ExtensionName+".complete", "background, with handler: true: the completer has no request to call the handler with; use phases, or complete: on-retry")
		}
	}
	return x, p.errs
}

// key reads key: the header or body member the key comes from, whether it
// is required, and what it may look like.
func (p *parser) key(k *Key, m map[string]any) {
	const field = ExtensionName + ".key"
	km, ok := p.section(m, "key", "header", "pointer", "required", "maxLength", "minLength", "format")
	if !ok {
		return
	}
	p.keySource(k, km)
	if v, ok := km["required"]; ok {
		if b, ok := p.boolean(field+".required", v); ok {
			if !b && k.Pointer != "" {
				p.errorf(field+".required", "a key in the body is always required: key.pointer must name a member the body schema requires; remove required: false")
			} else {
				k.Required = b
			}
		}
	}
	if v, ok := km["maxLength"]; ok {
		if n, ok := p.integer(field+".maxLength", v, 1, 8192); ok {
			k.MaxLength = n
		}
	}
	if v, ok := km["minLength"]; ok {
		if n, ok := p.integer(field+".minLength", v, 1, 8192); ok {
			if n > k.MaxLength {
				p.errorf(field+".minLength", "%d exceeds key.maxLength %d: no key could be sent", n, k.MaxLength)
			} else {
				k.MinLength, k.MinLengthSet = n, true
			}
		}
	}
	k.Format = choice(p, km, field, "format", k.Format, idemtype.KeyFormatAny, idemtype.KeyFormatUUID, idemtype.KeyFormatRaw)
	_, k.FormatSet = km["format"]
}

// keySource reads key.header and key.pointer, which exclude each other.
func (p *parser) keySource(k *Key, km map[string]any) {
	const field = ExtensionName + ".key"
	if v, ok := km["header"]; ok {
		if s, ok := p.str(field+".header", v); ok {
			if !idemtype.ValidHeaderName(s) {
				p.errorf(field+".header", "%q is not a valid header name", s)
			} else {
				k.Header = s
			}
		}
	}
	if v, ok := km["pointer"]; ok {
		if s, ok := p.str(field+".pointer", v); ok {
			_, both := km["header"]
			switch {
			case idemtype.CheckPointer(s) != nil:
				p.errorf(field+".pointer", "%q is not a JSON Pointer; it must start with / (e.g. /id)", s)
			case both:
				p.errorf(field+".pointer", "key.header and key.pointer exclude each other: a key comes from a header or from the body, not both")
			default:
				k.Pointer, k.Header = s, ""
			}
		}
	}
}

// scope reads scope: principal, global, header:<Name> or sender:<name>.
func (p *parser) scope(sc *Scope, m map[string]any) {
	parseField(p, "scope", m, idemtype.ParseScope, sc)
}

// placement reads placement: principal, header:<Name>, path:<param> or
// body:<pointer>.
func (p *parser) placement(pl *idemtype.Placement, m map[string]any) {
	parseField(p, "placement", m, idemtype.ParsePlacement, pl)
}

// naturalKey reads natural-key: a list of body:<pointer> and
// path:<param>.
func (p *parser) naturalKey(nk *[]idemtype.Placement, m map[string]any) {
	const field = ExtensionName + ".natural-key"
	v, ok := m["natural-key"]
	if !ok {
		return
	}
	l, ok := p.strings(field, v)
	if !ok {
		return
	}
	if len(l) == 0 {
		p.errorf(field, "an empty list; name the values that identify the intent (such as [body:/order_ref]), or leave natural-key out")
		return
	}
	for i, s := range l {
		// A part that does not parse is kept, zero, so that the checks
		// after it name each part by its index.
		part, err := idemtype.ParseNaturalKeyPart(s)
		if err != nil {
			p.errorf(fmt.Sprintf("%s[%d]", field, i), "%s", err)
		}
		*nk = append(*nk, part)
	}
}

// parseField reads the string field name of m into *out with parse, when
// it is there; an error is the field's.
func parseField[T any](p *parser, name string, m map[string]any, parse func(string) (T, error), out *T) {
	field := ExtensionName + "." + name
	v, ok := m[name]
	if !ok {
		return
	}
	s, ok := p.str(field, v)
	if !ok {
		return
	}
	parsed, err := parse(s)
	if err != nil {
		p.errorf(field, "%s", err)
		return
	}
	*out = parsed
}

// group reads group, the key namespace operations may share.
func (p *parser) group(g *string, m map[string]any) {
	const field = ExtensionName + ".group"
	v, ok := m["group"]
	if !ok {
		return
	}
	if s, ok := p.str(field, v); ok {
		if idemtype.ValidName(s) {
			*g = s
		} else {
			p.errorf(field, "%q is not a group name; use letters, digits, _ . - (starting with a letter, at most 63)", s)
		}
	}
}

// lifetimes reads retention and lease: a key must outlive every claim on
// it, and a lease is renewed every third of its length.
func (p *parser) lifetimes(x *Extension, m map[string]any) {
	const retention, lease = ExtensionName + ".retention", ExtensionName + ".lease"
	retentionSet, leaseSet := true, true
	if v, ok := m["retention"]; ok {
		x.Retention, retentionSet = p.duration(retention, v)
	}
	if v, ok := m["lease"]; ok {
		x.Lease, leaseSet = p.duration(lease, v)
		switch {
		case leaseSet && x.Lease < time.Second:
			p.errorf(lease, "%v is shorter than 1s; leases are renewed every third of their length", x.Lease)
		case leaseSet && x.Lease > idemtype.MaxLease:
			p.errorf(lease, "%v is longer than %v, the longest lease PostgreSQL's statement_timeout can bound a claim's transaction by", x.Lease, idemtype.MaxLease)
		}
	}
	if retentionSet && leaseSet && x.Retention <= x.Lease {
		p.errorf(retention, "%v must be longer than lease %v: a key must outlive every claim on it", x.Retention, x.Lease)
	}
}

// wait reads wait: how long a duplicate waits for the execution in flight,
// 0s (not at all) to idemtype.MaxWait.
func (p *parser) wait(x *Extension, m map[string]any) {
	const field = ExtensionName + ".wait"
	v, ok := m["wait"]
	if !ok {
		return
	}
	if s, isStr := v.(string); isStr {
		if d, err := parseDuration(s); err == nil && d == 0 {
			x.Wait = 0
			return
		}
	}
	d, ok := p.duration(field, v)
	switch {
	case !ok:
	case d > idemtype.MaxWait:
		p.errorf(field, "%v is longer than %v, the longest wait: past the timeouts of most clients and proxies, nobody is left to answer; use 0s to answer 409 at once", d, idemtype.MaxWait)
	default:
		x.Wait = d
	}
}

// fingerprint reads fingerprint: the body's JSON Pointers left out of a
// request's identity, and the headers added to it.
func (p *parser) fingerprint(f *Fingerprint, m map[string]any) {
	const field = ExtensionName + ".fingerprint"
	fm, ok := p.section(m, "fingerprint", "exclude", "headers")
	if !ok {
		return
	}
	if v, ok := fm["exclude"]; ok {
		if l, ok := p.strings(field+".exclude", v); ok {
			for i, ptr := range l {
				if idemtype.CheckPointer(ptr) != nil {
					p.errorf(fmt.Sprintf("%s.exclude[%d]", field, i), "%q is not a JSON Pointer; it must start with / (e.g. /client_ts)", ptr)
				}
			}
			f.Exclude = l
		}
	}
	if v, ok := fm["headers"]; ok {
		if l, ok := p.headerNames(field+".headers", v, nil); ok {
			f.Headers = l
		}
	}
}

// request reads request: the largest request body the operation takes.
func (p *parser) request(r *Request, m map[string]any) {
	rm, ok := p.section(m, "request", "maxBodyBytes")
	if !ok {
		return
	}
	if v, ok := rm["maxBodyBytes"]; ok {
		if n, ok := p.integer(ExtensionName+".request.maxBodyBytes", v, 1, MaxRequestBody); ok {
			r.MaxBodyBytes = n
		}
	}
}

// replay reads replay: the response headers stored, and the largest body.
func (p *parser) replay(r *Replay, m map[string]any) {
	const field = ExtensionName + ".replay"
	rm, ok := p.section(m, "replay", "headers", "maxBodyBytes", "render")
	if !ok {
		return
	}
	if v, ok := rm["render"]; ok {
		if l, ok := p.strings(field+".render", v); ok {
			if len(l) == 0 {
				p.errorf(field+".render", "empty; list the JSON Pointers of the answer's identifiers (e.g. [/id]), or leave render out to store answers byte for byte")
			}
			for i, ptr := range l {
				if idemtype.CheckPointer(ptr) != nil {
					p.errorf(fmt.Sprintf("%s.render[%d]", field, i), "%q is not a JSON Pointer; it must start with / (e.g. /id)", ptr)
				}
			}
			r.Render = l
		}
	}
	if v, ok := rm["headers"]; ok {
		if l, ok := p.headerNames(field+".headers", v, neverStored); ok {
			r.Headers = l
		}
	}
	if v, ok := rm["maxBodyBytes"]; ok {
		if n, ok := p.integer(field+".maxBodyBytes", v, 1, 64<<20); ok {
			r.MaxBodyBytes = n
		}
	}
}

// modes reads ambiguous and complete: what a failure after possible
// effects does, and who finishes an abandoned execution.
func (p *parser) modes(x *Extension, m map[string]any) {
	x.Ambiguous = choice(p, m, ExtensionName, "ambiguous", x.Ambiguous, idemtype.AmbiguousResume, idemtype.AmbiguousStore)
	x.Complete = choice(p, m, ExtensionName, "complete", x.Complete, idemtype.CompleteOnRetry, idemtype.CompleteBackground)
}

// phases reads phases: names unique, the last one local.
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

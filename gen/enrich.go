package gen

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"

	"github.com/idemgen/idemgen/runtime/idemtype"
	"github.com/idemgen/idemgen/spec"
)

// problemSchema is the name of the problem+json schema the enriched spec adds.
const problemSchema = "IdempotencyProblem"

// Enrich returns a copy of the spec for API documentation: each idempotent
// operation gains its key header parameter (unless it declares one), the
// 400, 409 and 422 problem responses (unless it declares them), and a
// paragraph on the policy (scope, retention) in its description. outName's
// extension chooses JSON (.json) or YAML.
//
// It reads the document already loaded and does not change it: what it adds
// goes into copies of the objects on the way from the root to each change,
// the rest is shared. doc must not have been through oapi-codegen, which
// prunes unused components from the document it generates from.
func Enrich(doc *spec.Document, outName string, s Settings) ([]byte, error) {
	t, err := enrichedDoc(doc, true, s)
	if err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(outName, ".json") {
		return append(out, '\n'), nil
	}
	var node yaml.Node
	if err := yaml.Unmarshal(out, &node); err != nil {
		return nil, err
	}
	clearStyle(&node)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&node); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}

// refusalFormat is how refusal responses are documented: their schema (a ref
// into components, and its value, resolved for oapi-codegen), media type and
// status per kind.
type refusalFormat struct {
	ref       string
	schema    *openapi3.Schema
	mediaType string
	statuses  map[idemtype.ErrorKind]int
}

func (f refusalFormat) status(k idemtype.ErrorKind) int {
	if s, ok := f.statuses[k]; ok {
		return s
	}
	return k.Status()
}

// stripeSchema names the schema of Stripe's error object that the stripe
// preset documents refusals with, when the config names no refusal-schema.
const stripeSchema = "IdempotencyStripeError"

// stripeErrorSchema adds Stripe's error object to t's components, unless
// it has one by that name, and returns its reference.
func stripeErrorSchema(t *openapi3.T) string {
	if _, ok := t.Components.Schemas[stripeSchema]; !ok {
		schemas := make(openapi3.Schemas, len(t.Components.Schemas)+1)
		maps.Copy(schemas, t.Components.Schemas)
		str := func() *openapi3.SchemaRef { return openapi3.NewSchemaRef("", openapi3.NewStringSchema()) }
		schemas[stripeSchema] = openapi3.NewSchemaRef("", &openapi3.Schema{
			Type:        &openapi3.Types{openapi3.TypeObject},
			Description: "Stripe's error object: type is idempotency_error (a key reused with other parameters, 400), invalid_request_error or api_error; message says what happened in words. What a retry with the same key gets past (a key in use, the store unavailable, a failed execution that a retry resumes) is 429 with code lock_timeout and Retry-After, which Stripe's clients retry.",
			Required:    []string{"error"},
			Properties: openapi3.Schemas{"error": openapi3.NewSchemaRef("", &openapi3.Schema{
				Type:       &openapi3.Types{openapi3.TypeObject},
				Required:   []string{"type", "message"},
				Properties: openapi3.Schemas{"type": str(), "code": str(), "message": str(), "param": str()},
			})},
		})
		t.Components.Schemas = schemas
	}
	return "#/components/schemas/" + stripeSchema
}

// enrichedDoc is the document Enrich writes: withKey adds the key header
// parameter too, which the client's document leaves out (its wrapper sends
// the key; a parameter would change oapi-codegen's method signatures). The
// refusals are documented as s says (Settings.RefusalSchema...).
func enrichedDoc(doc *spec.Document, withKey bool, s Settings) (*openapi3.T, error) {
	src := doc.OpenAPI
	t := *src
	if src.Components == nil {
		t.Components = &openapi3.Components{}
	} else {
		c := *src.Components
		t.Components = &c
	}
	f := refusalFormat{mediaType: idemtype.ProblemContentType, statuses: map[idemtype.ErrorKind]int{}}
	for k, v := range s.RefusalStatuses {
		f.statuses[idemtype.ErrorKind(k)] = v
	}
	if s.RefusalSchema != "" {
		ref, ok := t.Components.Schemas[s.RefusalSchema]
		if !ok || ref == nil || ref.Value == nil {
			return nil, spec.Errors{&spec.Error{File: doc.File, Message: fmt.Sprintf("idemgen.refusal-schema %q names no schema of the spec's components", s.RefusalSchema)}}
		}
		f.ref, f.schema, f.mediaType = "#/components/schemas/"+s.RefusalSchema, ref.Value, cmp.Or(s.RefusalMediaType, "application/json")
	} else if s.Preset == PresetStripe {
		f.ref, f.schema, f.mediaType = stripeErrorSchema(&t), t.Components.Schemas[stripeSchema].Value, "application/json"
	} else if _, ok := t.Components.Schemas[problemSchema]; !ok {
		schemas := make(openapi3.Schemas, len(t.Components.Schemas)+1)
		maps.Copy(schemas, t.Components.Schemas)
		schemas[problemSchema] = openapi3.NewSchemaRef("", &openapi3.Schema{
			Type:        &openapi3.Types{openapi3.TypeObject},
			Description: "An RFC 9457 problem. type is urn:idemgen:problem:<kind>.",
			Required:    []string{"type", "title", "status"},
			Properties: openapi3.Schemas{
				"type":   openapi3.NewSchemaRef("", openapi3.NewStringSchema()),
				"title":  openapi3.NewSchemaRef("", openapi3.NewStringSchema()),
				"status": openapi3.NewSchemaRef("", openapi3.NewIntegerSchema()),
				"detail": openapi3.NewSchemaRef("", openapi3.NewStringSchema()),
			},
		})
		t.Components.Schemas = schemas
	}
	if f.schema == nil {
		f.ref, f.schema = "#/components/schemas/"+problemSchema, t.Components.Schemas[problemSchema].Value
	}
	enriched := map[*openapi3.Operation]*openapi3.Operation{}
	for _, op := range doc.Idempotent() {
		enriched[op.Op] = enrichOperation(op, withKey, f)
	}
	if len(enriched) > 0 {
		t.Paths = withOperations(src.Paths, enriched)
	}
	return &t, nil
}

// clearStyle drops the JSON flow style so the YAML reads as block YAML.
func clearStyle(n *yaml.Node) {
	n.Style &^= yaml.FlowStyle | yaml.DoubleQuotedStyle
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" && needsQuotes(n.Value) {
		n.Style = yaml.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		clearStyle(c)
	}
}

func needsQuotes(s string) bool {
	var v any
	return yaml.Unmarshal([]byte(s), &v) != nil || fmt.Sprint(v) != s
}

// withOperations returns a copy of paths in which each operation that is a
// key of repl is replaced by its value.
func withOperations(paths *openapi3.Paths, repl map[*openapi3.Operation]*openapi3.Operation) *openapi3.Paths {
	items := paths.Map()
	out := openapi3.NewPathsWithCapacity(len(items))
	out.Extensions, out.Origin = paths.Extensions, paths.Origin
	for path, item := range items {
		var copied *openapi3.PathItem
		for method, op := range item.Operations() {
			if repl[op] == nil {
				continue
			}
			if copied == nil {
				c := *item
				c.AdditionalOperations = maps.Clone(item.AdditionalOperations)
				copied = &c
			}
			copied.SetOperation(method, repl[op])
		}
		if copied != nil {
			item = copied
		}
		out.Set(path, item)
	}
	return out
}

// enrichOperation returns a copy of op's operation with the key parameter,
// the problem responses and the policy paragraph added.
func enrichOperation(op *spec.Operation, withKey bool, f refusalFormat) *openapi3.Operation {
	x := op.Idempotency
	c := *op.Op
	o := &c
	declared := x.Key.Pointer != "" || !withKey // a body key is documented in the description, not as a parameter
	for _, p := range o.Parameters {
		if p.Value != nil && p.Value.In == openapi3.ParameterInHeader && strings.EqualFold(p.Value.Name, x.Key.Header) {
			declared = true
		}
	}
	if !declared {
		schema := openapi3.NewStringSchema().WithMaxLength(int64(x.Key.MaxLength))
		if x.Key.Format == idemtype.KeyFormatUUID {
			schema.Format = "uuid"
		}
		o.Parameters = append(slices.Clip(o.Parameters), &openapi3.ParameterRef{Value: &openapi3.Parameter{
			Name: x.Key.Header, In: openapi3.ParameterInHeader, Required: x.Key.Required,
			Description: "A unique value per logical request. Retries with the same value and body get the first response, marked Idempotent-Replayed: true.",
			Schema:      openapi3.NewSchemaRef("", schema),
		}})
	}
	missing := "The Idempotency-Key header is missing or malformed, or the body cannot be fingerprinted."
	if x.Key.Pointer != "" {
		missing = fmt.Sprintf("The idempotency key, the body's %s, is missing or malformed, or the body cannot be fingerprinted.", x.Key.Pointer)
	} else if x.Key.Header != idemtype.DefaultKeyHeader {
		missing = fmt.Sprintf("The idempotency key, the %s header, is missing or malformed, or the body cannot be fingerprinted.", x.Key.Header)
	}
	o.Responses = withResponses(o.Responses, refusals(x, missing, len(mediaTypes(op)) > 0), f)
	scope := map[idemtype.ScopeKind]string{
		idemtype.ScopePrincipal: "the authenticated caller",
		idemtype.ScopeGlobal:    "the whole service",
		idemtype.ScopeHeader:    "the value of the " + x.Scope.Name + " header",
		idemtype.ScopePath:      "the value of the path parameter " + x.Scope.Name,
		idemtype.ScopeSender:    "the signed sender (verifier " + x.Scope.Name + ")",
	}[x.Scope.Kind]
	if x.Scope.Principal {
		scope = "the authenticated caller and " + scope
	}
	ns := "this operation"
	if x.Group != "" {
		ns = "the operations of group " + x.Group
	}
	var policy string
	if x.Key.Pointer != "" {
		policy = fmt.Sprintf("Idempotent: the key is the request body's %s (required, at most %d characters). Keys are unique per %s and %s, and remembered for %s; a request with the same key and body gets the stored response, marked Idempotent-Replayed: true.",
			x.Key.Pointer, x.Key.MaxLength, scope, ns, humanDuration(x.Retention.String()))
	} else {
		policy = fmt.Sprintf("Idempotent: send the %s header (%s). Keys are unique per %s and %s, and remembered for %s; a retry with the same key and body gets the stored response.",
			x.Key.Header, map[bool]string{true: "required", false: "optional"}[x.Key.Required], scope, ns, humanDuration(x.Retention.String()))
	}
	if x.Scope.Kind == idemtype.ScopeSender {
		policy += " Requests must be signed: a missing or bad signature is 401 and nothing is recorded."
	}
	if len(x.Replay.Render) > 0 {
		policy += fmt.Sprintf(" A retry's answer is rendered again, not replayed byte for byte (marked Idempotent-Rendered: true): its status, its headers and %s are the first answer's, its other fields show the resource as it is now.", strings.Join(x.Replay.Render, ", "))
	}
	if o.Description != "" {
		o.Description += "\n\n"
	}
	o.Description += policy
	return o
}

// refusal documents the refusals of one status: the problem kinds it
// carries, and whether it sends Retry-After.
type refusal struct {
	kinds      []idemtype.ErrorKind
	desc       string
	retryAfter bool
}

// refusals are every answer the idempotency middleware and the engine can
// give an operation with policy x besides its own responses, by status:
// each status once, its kinds as idemtype defines them. missing describes
// the 400.
func refusals(x *spec.Extension, missing string, body bool) []refusal {
	bad := []idemtype.ErrorKind{idemtype.KindMissingKey, idemtype.KindInvalidKey, idemtype.KindInvalidRequest}
	var unauthorized []idemtype.ErrorKind
	var why []string
	switch x.Scope.Kind {
	case idemtype.ScopeGlobal:
	case idemtype.ScopeSender:
		unauthorized = append(unauthorized, idemtype.KindInvalidSignature)
		why = append(why, "the request's signature is missing, malformed, too old or does not match its body")
	default:
		bad = append(bad, idemtype.KindInvalidScope)
		unauthorized = append(unauthorized, idemtype.KindMissingScope)
		why = append(why, "there is no "+map[bool]string{true: "caller", false: "value"}[x.Scope.Kind == idemtype.ScopePrincipal || x.Scope.Kind == ""]+" to scope the key to")
	}
	if x.Scope.Principal {
		why = []string{"there is no caller to scope the key to"}
	}
	out := []refusal{{kinds: bad, desc: missing}}
	if len(unauthorized) > 0 {
		out = append(out, refusal{kinds: unauthorized, desc: "Unauthorized for an idempotent request: " + strings.Join(why, "; ") + "; nothing was recorded."})
	}
	if body {
		out = append(out, refusal{kinds: []idemtype.ErrorKind{idemtype.KindMediaType}, desc: "The request body's media type is not one this operation declares; nothing was recorded."})
	}
	return append(out,
		refusal{kinds: []idemtype.ErrorKind{idemtype.KindInFlight}, desc: "A request with this key is still in progress; retry after Retry-After seconds.", retryAfter: true},
		refusal{kinds: []idemtype.ErrorKind{idemtype.KindNotStored}, desc: "The request with this key completed, but its response was too large to store for replay; the detail gives its status."},
		refusal{kinds: []idemtype.ErrorKind{idemtype.KindTooLarge}, desc: "The request body is larger than this operation accepts; nothing was recorded."},
		refusal{kinds: []idemtype.ErrorKind{idemtype.KindMismatch}, desc: "This key was already used with a different request."},
		refusal{kinds: []idemtype.ErrorKind{idemtype.KindFailed}, desc: "The request failed after it may have had effects; retry with the same key to resume it."},
		refusal{kinds: []idemtype.ErrorKind{idemtype.KindUnavailable}, desc: "The idempotency store did not answer, or a commit's outcome is unknown; retry with the same key after Retry-After seconds.", retryAfter: true},
	)
}

// withResponses returns a copy of responses (nil: none) with a refusal
// response for each status the refusals rs are answered with (f's status
// of each kind) that it does not declare, in f's media type and schema
// (resolved: oapi-codegen reads the value).
func withResponses(responses *openapi3.Responses, rs []refusal, f refusalFormat) *openapi3.Responses {
	var out *openapi3.Responses
	if responses == nil {
		out = openapi3.NewResponses()
	} else {
		m := responses.Map()
		out = openapi3.NewResponsesWithCapacity(len(m) + len(rs))
		out.Extensions, out.Origin = responses.Extensions, responses.Origin
		for code, resp := range m {
			out.Set(code, resp)
		}
	}
	// Kinds of one status (by f) are documented together.
	type group struct {
		kinds      []string
		descs      []string
		retryAfter bool
	}
	groups := map[int]*group{}
	for _, r := range rs {
		for _, k := range r.kinds {
			st := f.status(k)
			g := groups[st]
			if g == nil {
				g = &group{}
				groups[st] = g
			}
			g.kinds = append(g.kinds, k.ProblemType())
			if !slices.Contains(g.descs, r.desc) {
				g.descs = append(g.descs, r.desc)
			}
			g.retryAfter = g.retryAfter || r.retryAfter
		}
	}
	for _, st := range slices.Sorted(maps.Keys(groups)) {
		code, g := strconv.Itoa(st), groups[st]
		if out.Value(code) != nil {
			continue
		}
		resp := openapi3.NewResponse().WithDescription(strings.Join(g.descs, " ") + " Problem types: " + strings.Join(g.kinds, ", ") + ".").
			WithContent(openapi3.Content{f.mediaType: openapi3.NewMediaType().WithSchemaRef(openapi3.NewSchemaRef(f.ref, f.schema))})
		if g.retryAfter {
			resp.Headers = openapi3.Headers{"Retry-After": &openapi3.HeaderRef{Value: &openapi3.Header{Parameter: openapi3.Parameter{
				Description: "Seconds to wait before retrying with the same key.",
				Schema:      openapi3.NewSchemaRef("", openapi3.NewIntegerSchema().WithMin(0)),
			}}}}
		}
		out.Set(code, &openapi3.ResponseRef{Value: resp})
	}
	return out
}

// humanDuration turns 24h0m0s into 24h.
func humanDuration(s string) string {
	for _, suf := range []string{"0s", "0m"} {
		if strings.HasSuffix(s, "m"+suf) || strings.HasSuffix(s, "h"+suf) {
			s = strings.TrimSuffix(s, suf)
		}
	}
	return s
}

package gen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/spec"
)

// problemSchema is the name of the problem+json schema the enriched spec adds.
const problemSchema = "IdempotencyProblem"

// Enrich returns a copy of the spec for API documentation: each idempotent
// operation gains its key header parameter (unless it declares one), the
// 400, 409 and 422 problem responses (unless it declares them), and a
// paragraph on the policy (scope, retention) in its description. outName's
// extension chooses JSON (.json) or YAML.
func Enrich(file string, data []byte, outName string) ([]byte, error) {
	doc, err := spec.LoadData(file, data)
	if err != nil {
		return nil, err
	}
	t := doc.OpenAPI
	if t.Components == nil {
		t.Components = &openapi3.Components{}
	}
	if t.Components.Schemas == nil {
		t.Components.Schemas = openapi3.Schemas{}
	}
	if _, ok := t.Components.Schemas[problemSchema]; !ok {
		t.Components.Schemas[problemSchema] = openapi3.NewSchemaRef("", &openapi3.Schema{
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
	}
	for _, op := range doc.Idempotent() {
		enrichOperation(op)
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

func enrichOperation(op *spec.Operation) {
	x := op.Idempotency
	o := op.Op
	declared := x.Key.Pointer != "" // a body key is documented in the description, not as a parameter
	for _, p := range o.Parameters {
		if p.Value != nil && p.Value.In == openapi3.ParameterInHeader && strings.EqualFold(p.Value.Name, x.Key.Header) {
			declared = true
		}
	}
	if !declared {
		schema := openapi3.NewStringSchema().WithMaxLength(int64(x.Key.MaxLength))
		if x.Key.Format == "uuid" {
			schema.Format = "uuid"
		}
		o.Parameters = append(o.Parameters, &openapi3.ParameterRef{Value: &openapi3.Parameter{
			Name: x.Key.Header, In: openapi3.ParameterInHeader, Required: x.Key.Required,
			Description: "A unique value per logical request. Retries with the same value and body get the first response, marked Idempotent-Replayed: true.",
			Schema:      openapi3.NewSchemaRef("", schema),
		}})
	}
	if o.Responses == nil {
		o.Responses = openapi3.NewResponses()
	}
	missing := "The Idempotency-Key header is missing or malformed, or the body cannot be fingerprinted."
	if x.Key.Pointer != "" {
		missing = fmt.Sprintf("The idempotency key, the body's %s, is missing or malformed, or the body cannot be fingerprinted.", x.Key.Pointer)
	} else if x.Key.Header != idemhttp.HeaderName {
		missing = fmt.Sprintf("The idempotency key, the %s header, is missing or malformed, or the body cannot be fingerprinted.", x.Key.Header)
	}
	type response struct {
		code string
		kind []idem.Kind
		desc string
	}
	responses := []response{
		{"400", []idem.Kind{idem.KindMissingKey, idem.KindInvalidKey, idem.KindInvalidRequest}, missing},
		{"409", []idem.Kind{idem.KindInFlight}, "A request with this key is still in progress; retry after Retry-After seconds."},
		{"422", []idem.Kind{idem.KindMismatch}, "This key was already used with a different request."},
	}
	if x.Scope.Kind == "sender" {
		responses = append(responses, response{"401", []idem.Kind{idem.KindInvalidSignature},
			"The request's signature is missing, malformed, too old or does not match its body; nothing was recorded."})
	}
	for _, r := range responses {
		if o.Responses.Value(r.code) != nil {
			continue
		}
		kinds := make([]string, len(r.kind))
		for i, k := range r.kind {
			kinds[i] = idem.ProblemTypeBase + string(k)
		}
		desc := r.desc + " Problem types: " + strings.Join(kinds, ", ") + "."
		o.Responses.Set(r.code, &openapi3.ResponseRef{Value: openapi3.NewResponse().WithDescription(desc).
			WithContent(openapi3.Content{"application/problem+json": openapi3.NewMediaType().WithSchemaRef(
				openapi3.NewSchemaRef("#/components/schemas/"+problemSchema, nil))})})
	}
	scope := map[string]string{
		"principal": "the authenticated caller",
		"global":    "the whole service",
		"header":    "the value of the " + x.Scope.Header + " header",
		"sender":    "the signed sender (verifier " + x.Scope.Sender + ")",
	}[x.Scope.Kind]
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
	if x.Scope.Kind == "sender" {
		policy += " Requests must be signed: a missing or bad signature is 401 and nothing is recorded."
	}
	if o.Description != "" {
		o.Description += "\n\n"
	}
	o.Description += policy
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

package spec

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// checkBody checks the extension against the request body: exclusions must
// resolve, and background completion needs a body that can be stored.
func checkBody(op *Operation, at func(field, format string, args ...any)) {
	x := op.Idempotency
	var content openapi3.Content
	if rb := op.Op.RequestBody; rb != nil && rb.Value != nil {
		content = rb.Value.Content
	}
	var jsonSchema, formSchema *openapi3.Schema
	other := []string{}
	for _, mt := range sortedKeys(content) {
		var s *openapi3.Schema
		if content[mt] != nil && content[mt].Schema != nil {
			s = content[mt].Schema.Value
		}
		switch base, _, _ := strings.Cut(mt, ";"); {
		case base == "application/json" || strings.HasSuffix(base, "+json"):
			jsonSchema = orEmpty(s)
		case base == "application/x-www-form-urlencoded":
			formSchema = orEmpty(s)
		case base == "multipart/form-data":
			// Its parts are fields, excluded by name as a form's are; it
			// stays among the others, which carry no key in the body and
			// are not stored for background completion.
			if formSchema == nil {
				formSchema = orEmpty(s)
			}
			other = append(other, mt)
		default:
			other = append(other, mt)
		}
	}
	for i, ptr := range x.Fingerprint.Exclude {
		field := fmt.Sprintf("%s.fingerprint.exclude[%d]", ExtensionName, i)
		toks, err := idemtype.ParsePointer(ptr)
		switch {
		case err != nil:
			// reported by Parse
		case jsonSchema == nil && formSchema == nil:
			at(field, "%q cannot apply: the operation has no JSON or form request body", ptr)
		case jsonSchema != nil && unresolved(jsonSchema, toks, "", 0) == "":
		case formSchema != nil && bracketed(toks) != "":
			at(field, "%q names a form field with its brackets; in a form body a pointer's steps are the brackets: %s", ptr, bracketed(toks))
		case formSchema != nil && unresolved(formSchema, toks, "", 0) == "":
		case jsonSchema != nil:
			at(field, "%q does not resolve against the request body schema: %s", ptr, unresolved(jsonSchema, toks, "", 0))
		default:
			at(field, "%q does not resolve against the form body's schema: %s (a pointer names a form field, /expand, and what nests under it: expand[], expand[N]; /metadata/k names metadata[k])", ptr, unresolved(formSchema, toks, "", 0))
		}
	}
	for i, part := range x.NaturalKey {
		if part.Kind != idemtype.PlacementBody {
			continue
		}
		field := fmt.Sprintf("%s.natural-key[%d]", ExtensionName, i)
		toks, err := idemtype.ParsePointer(part.Name)
		switch {
		case err != nil:
			// reported by Parse
		case jsonSchema == nil:
			at(field, "%q cannot apply: the operation has no JSON request body to read it from; name a path parameter (path:<param>) instead", part)
		case unresolved(jsonSchema, toks, "", 0) != "":
			at(field, "%q does not resolve against the request body schema: %s; name a member of the body (such as body:/order_ref)", part, unresolved(jsonSchema, toks, "", 0))
		}
	}
	if x.Key.Pointer != "" {
		checkKeyPointer(op, at, jsonSchema, other)
	}
	if x.Complete == idemtype.CompleteBackground && len(other) > 0 {
		at(ExtensionName+".complete", "background completion stores the request to replay it, which needs a JSON or form body; this operation also accepts %s", strings.Join(other, ", "))
	}
}

// checkKeyPointer checks a key taken from the body: the operation's body
// must be JSON and required, and the pointer must name a member present in
// every valid request (each member on the way required by its object) whose
// value is a string or an integer.
func checkKeyPointer(op *Operation, at func(field, format string, args ...any), jsonSchema *openapi3.Schema, other []string) {
	const field = ExtensionName + ".key.pointer"
	ptr := op.Idempotency.Key.Pointer
	rb := op.Op.RequestBody
	switch {
	case jsonSchema == nil:
		at(field, "%q cannot apply: the operation has no JSON request body to take the key from", ptr)
		return
	case len(other) > 0:
		at(field, "%q is read from the JSON body, but this operation also accepts %s, which has no key; accept only JSON", ptr, strings.Join(other, ", "))
	case rb.Value == nil || !rb.Value.Required:
		at(field, "%q cannot be required: the request body is optional; set requestBody.required: true so that every request carries its key", ptr)
	}
	if reason := keyMember(jsonSchema, keyTokens(ptr), "", nil, 0); reason != "" {
		at(field, "%q %s", ptr, reason)
	}
}

// keyMember walks toks through s and returns "" when they name a member
// that every valid body has, holding a string or an integer; otherwise why
// not. at is the pointer walked so far; inherited lists members required by
// an enclosing schema whose oneOf or anyOf alternatives s is.
func keyMember(s *openapi3.Schema, toks []string, at string, inherited []string, depth int) string {
	if depth > 32 {
		return "nests too deep to check"
	}
	props, required, types, alts := flatten(s, depth)
	required = append(required, inherited...)
	if len(toks) == 0 {
		return keyScalar(s, types, alts, at, depth)
	}
	name := toks[0]
	here := at + "/" + idemtype.EscapePointerToken(name)
	if s.Items != nil || slices.Contains(types, "array") {
		return fmt.Sprintf("goes through the array %s; a key must be a member of objects only, each one required", orRoot(at))
	}
	prop, ok := props[name]
	if !ok {
		if len(alts) > 0 {
			for _, alt := range alts {
				if alt != nil {
					if reason := keyMember(alt.Value, toks, at, required, depth+1); reason != "" {
						return reason
					}
				}
			}
			return ""
		}
		return "does not resolve against the request body schema" + hintAt(at, props)
	}
	if !slices.Contains(required, name) && !requiredByAll(alts, name, depth) {
		return fmt.Sprintf("names an optional member: %q is not in the required list of %s; a key must be in every request, so require it", name, orRoot(at))
	}
	if prop == nil || prop.Value == nil {
		return fmt.Sprintf("names %s, which has no schema; a key must be declared as a string or an integer", here)
	}
	return keyMember(prop.Value, toks[1:], here, nil, depth+1)
}

// keyScalar says whether the schema at the end of a key pointer holds a
// string or an integer, never null.
func keyScalar(s *openapi3.Schema, types []string, alts openapi3.SchemaRefs, at string, depth int) string {
	if len(types) == 0 && len(alts) > 0 {
		for _, alt := range alts {
			if alt != nil {
				if reason := keyMember(alt.Value, nil, at, nil, depth+1); reason != "" {
					return reason
				}
			}
		}
		return ""
	}
	if len(types) == 0 {
		return "names a member without a type; a key must be declared as a string or an integer"
	}
	if s.Nullable || slices.Contains(types, "null") {
		return "names a member that may be null; a key must be a string or an integer"
	}
	for _, t := range types {
		switch t {
		case "string", "integer":
		case "number":
			return "names a number; a key must be a string or an integer (1 and 1.0 would be two keys)"
		default:
			return fmt.Sprintf("names %s %s; a key must be a string or an integer", article(t), t)
		}
	}
	return ""
}

// flatten merges a schema with its allOf parts: their properties, required
// members and types; alts are its oneOf and anyOf alternatives.
func flatten(s *openapi3.Schema, depth int) (props openapi3.Schemas, required, types []string, alts openapi3.SchemaRefs) {
	props = openapi3.Schemas{}
	var walk func(s *openapi3.Schema, depth int)
	walk = func(s *openapi3.Schema, depth int) {
		if s == nil || depth > 32 {
			return
		}
		for k, v := range s.Properties {
			if _, ok := props[k]; !ok {
				props[k] = v
			}
		}
		required = append(required, s.Required...)
		if s.Type != nil {
			types = append(types, s.Type.Slice()...)
		}
		alts = append(alts, s.OneOf...)
		alts = append(alts, s.AnyOf...)
		for _, sub := range s.AllOf {
			if sub != nil {
				walk(sub.Value, depth+1)
			}
		}
	}
	walk(s, depth)
	return props, required, types, alts
}

// requiredByAll reports whether every alternative requires name.
func requiredByAll(alts openapi3.SchemaRefs, name string, depth int) bool {
	if len(alts) == 0 {
		return false
	}
	for _, alt := range alts {
		if alt == nil {
			return false
		}
		_, required, _, _ := flatten(alt.Value, depth+1)
		if !slices.Contains(required, name) {
			return false
		}
	}
	return true
}

func orRoot(at string) string {
	if at == "" {
		return "the body"
	}
	return at
}

func hintAt(at string, props openapi3.Schemas) string {
	switch {
	case len(props) == 0:
		return ""
	case at == "":
		return "; top-level properties are " + strings.Join(sortedKeys(props), ", ")
	}
	return "; the properties of " + at + " are " + strings.Join(sortedKeys(props), ", ")
}

func article(t string) string {
	if strings.ContainsAny(t[:1], "aeiou") {
		return "an"
	}
	return "a"
}

// checkReplayFits refuses a maxBodyBytes below the smallest body that a
// response's schema allows: such a response could never be replayed.
// Responses that may or may not fit are checked at run time (a replay of
// an unstored body is the response-not-stored problem).
func checkReplayFits(op *Operation, at func(field, format string, args ...any)) {
	if op.Op.Responses == nil {
		return
	}
	if len(op.Idempotency.Replay.Render) > 0 {
		checkRender(op, at)
		return // a rendered answer is stored compact: no cap applies
	}
	limit := op.Idempotency.Replay.MaxBodyBytes
	responses := op.Op.Responses.Map()
	for _, code := range sortedKeys(responses) {
		r := responses[code]
		if r == nil || r.Value == nil {
			continue
		}
		for _, mt := range sortedKeys(r.Value.Content) {
			c := r.Value.Content[mt]
			if c == nil || c.Schema == nil || c.Schema.Value == nil {
				continue
			}
			if n := minJSONSize(c.Schema.Value, 0); n > int64(limit) {
				at(ExtensionName+".replay.maxBodyBytes", "%d is below the smallest %s body of response %s (%d bytes by its schema): it could never be replayed; raise maxBodyBytes",
					limit, mt, code, n)
			}
		}
	}
}

// checkRender refuses a replay.render pointer that a successful (2xx)
// JSON response's schema does not have: its answers could not be
// rendered again from a reference to it. An operation with no 2xx JSON
// response has nothing to render.
func checkRender(op *Operation, at func(field, format string, args ...any)) {
	responses := op.Op.Responses.Map()
	found := false
	for _, code := range sortedKeys(responses) {
		r := responses[code]
		if r == nil || r.Value == nil || len(code) != 3 || code[0] != '2' {
			continue
		}
		for _, mt := range sortedKeys(r.Value.Content) {
			c := r.Value.Content[mt]
			if c == nil || c.Schema == nil || c.Schema.Value == nil || !strings.Contains(mt, "json") {
				continue
			}
			found = true
			for i, ptr := range op.Idempotency.Replay.Render {
				if slices.Contains(keyTokens(ptr), idemtype.EveryElement) {
					at(fmt.Sprintf("%s.replay.render[%d]", ExtensionName, i), "%q steps into every element (*): a reference names single values; name an element (/items/0/id) or the array itself", ptr)
					continue
				}
				if why := unresolved(c.Schema.Value, keyTokens(ptr), "", 0); why != "" {
					at(fmt.Sprintf("%s.replay.render[%d]", ExtensionName, i), "%q does not resolve against response %s's %s schema: %s", ptr, code, mt, why)
				}
			}
		}
	}
	if !found {
		at(ExtensionName+".replay.render", "the operation has no 2xx JSON response to render again from a reference; leave render out")
	}
}

// minJSONSize is a lower bound of the size of any JSON document valid
// against s: required members, minItems elements, minLength characters.
func minJSONSize(s *openapi3.Schema, depth int) int64 {
	if s == nil || depth > 32 {
		return 0
	}
	var n int64
	switch {
	case s.Type.Is("string"):
		n = 2 + int64(s.MinLength)
	case s.Type.Is("array"):
		n = 2
		if s.MinItems > 0 {
			var item *openapi3.Schema
			if s.Items != nil {
				item = s.Items.Value
			}
			n += int64(s.MinItems) * (minJSONSize(item, depth+1) + 1)
		}
	case s.Type.Is("object"):
		n = 2
		for _, name := range s.Required {
			var prop *openapi3.Schema
			if ref := s.Properties[name]; ref != nil {
				prop = ref.Value
			}
			n += int64(len(name)) + 4 + minJSONSize(prop, depth+1)
		}
	default:
		n = 1
	}
	for _, sub := range s.AllOf {
		if sub != nil {
			n = max(n, minJSONSize(sub.Value, depth+1))
		}
	}
	return n
}

func orEmpty(s *openapi3.Schema) *openapi3.Schema {
	if s == nil {
		return &openapi3.Schema{}
	}
	return s
}

func propertyHint(schemas ...*openapi3.Schema) string {
	var names []string
	for _, s := range schemas {
		if s != nil {
			names = append(names, sortedKeys(s.Properties)...)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return "; top-level properties are " + strings.Join(names, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// keyTokens returns the reference tokens of the key pointer p; nil for a
// pointer Parse refused.
func keyTokens(p string) []string {
	toks, _ := idemtype.ParsePointer(p)
	return toks
}

// unresolved returns "" when the pointer tokens name a place the schema
// allows, as resolves does, and otherwise why not, naming the step that
// fails (at is the pointer up to s). An array's step is an element's index
// or *, every element.
func unresolved(s *openapi3.Schema, toks []string, at string, depth int) string {
	if len(toks) == 0 {
		return ""
	}
	if s == nil || depth > 32 {
		return orRoot(at) + " cannot be followed further"
	}
	why := ""
	for _, group := range [][]*openapi3.SchemaRef{s.AllOf, s.OneOf, s.AnyOf} {
		for _, sub := range group {
			if sub == nil {
				continue
			}
			w := unresolved(sub.Value, toks, at, depth+1)
			if w == "" {
				return ""
			}
			if why == "" {
				why = w
			}
		}
	}
	if s.Type != nil && len(s.Type.Slice()) > 0 && !s.Type.Includes(openapi3.TypeObject) && !s.Type.Includes(openapi3.TypeArray) {
		return fmt.Sprintf("%s is %s %s: nothing is inside it for %q to name", orRoot(at), article(s.Type.Slice()[0]), s.Type.Slice()[0], toks[0])
	}
	next := at + "/" + idemtype.EscapePointerToken(toks[0])
	if s.Items != nil {
		if toks[0] == idemtype.EveryElement || isIndex(toks[0]) {
			return unresolved(s.Items.Value, toks[1:], next, depth+1)
		}
		return fmt.Sprintf("%s is an array, so the step after it is an element's index (0, 1, ...) or %s for every element, not %q", orRoot(at), idemtype.EveryElement, toks[0])
	}
	if p, ok := s.Properties[toks[0]]; ok {
		if p == nil {
			return ""
		}
		return unresolved(p.Value, toks[1:], next, depth+1)
	}
	ap := s.AdditionalProperties
	switch {
	case ap.Schema != nil:
		return unresolved(ap.Schema.Value, toks[1:], next, depth+1)
	case ap.Has != nil && *ap.Has:
		return ""
	case ap.Has == nil && len(s.Properties) == 0 && len(s.AllOf)+len(s.OneOf)+len(s.AnyOf) == 0:
		return "" // free-form
	case why != "" && len(s.Properties) == 0:
		return why
	}
	return fmt.Sprintf("%s has no property %q%s", orRoot(at), toks[0], hintAt(at, s.Properties))
}

// bracketed returns, for pointer tokens that spell a form field's
// brackets (/expand[] or /metadata[k]), the pointer that names it in a form
// body and what it covers; "" for tokens without brackets.
func bracketed(toks []string) string {
	for _, t := range toks {
		if strings.ContainsAny(t, "[]") {
			steps := idemtype.FormSteps(strings.Join(toks, ""))
			ptr := "/" + strings.Join(steps[:1], "/")
			if len(steps) > 1 && steps[1] != "" {
				ptr = "/" + strings.Join(steps, "/")
			}
			return fmt.Sprintf("write %s (in a form body /expand covers expand, expand[] and expand[N], and /metadata/k covers metadata[k])", ptr)
		}
	}
	return ""
}

// isIndex reports whether tok is an array index: digits without a leading
// zero.
func isIndex(tok string) bool {
	if tok == "" || len(tok) > 1 && tok[0] == '0' {
		return false
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return false
		}
	}
	return true
}

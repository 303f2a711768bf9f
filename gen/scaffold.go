package gen

import (
	"bytes"
	"fmt"
	"go/format"
	"strings"
	"text/template"
	"unicode"
)

// scaffoldPhase is one phase as the scaffold template (built in, or a
// user's override) sees it in .Phases. Params and Results are the method's
// signature as Go source, from the same definition as the phases
// interface it implements (phase.go).
type scaffoldPhase struct {
	GoName  string // the method, e.g. ChargeCard
	Doc     string // its doc comment, wrapped: "// " starts every line but the first
	Params  string // e.g. "ctx context.Context, key string, request CreatePaymentRequestObject, state *CreatePaymentState"
	Results string // e.g. "error", or "(CreatePaymentResponseObject, error)" for the final phase
	Final   bool   // the last phase, which returns the response
}

// renderScaffolds renders one user-owned phase file per idempotent
// operation, named after the operationId in snake_case.
func renderScaffolds(tmpl *template.Template, r *ir) ([]OutputFile, error) {
	var files []OutputFile
	for _, o := range r.Idempotent {
		if o.X.Handler {
			continue // the service's own handler serves it: nothing to fill in
		}
		var phases []scaffoldPhase
		for i, p := range o.Phases {
			sig := o.method(p)
			phases = append(phases, scaffoldPhase{GoName: p.GoName, Doc: strings.TrimPrefix(strings.Join(commentLines(commentWidth, phaseDoc(o, i, p)), "\n"), "// "), Params: sig.paramsText(), Results: sig.resultsText(), Final: p.Final})
		}
		if o.renders() {
			sig := o.renderMethod()
			phases = append(phases, scaffoldPhase{GoName: "Render", Doc: strings.TrimPrefix(strings.Join(commentLines(commentWidth, renderDoc), "\n"), "// "), Params: sig.paramsText(), Results: sig.resultsText(), Final: true})
		}
		var buf bytes.Buffer
		err := tmpl.Execute(&buf, map[string]any{
			"Package": r.Package, "OperationID": o.Spec.OperationID, "Iface": o.PhasesIface(),
			"State": o.StateType(), "Impl": o.ImplType(), "Phases": phases,
			"OperationFunc": o.operationFunc(), "PhaseListFunc": o.bindFunc(),
		})
		if err != nil {
			return nil, fmt.Errorf("gen: scaffold for %s: %w", o.Spec.OperationID, err)
		}
		src, err := format.Source(buf.Bytes())
		if err != nil {
			return nil, fmt.Errorf("gen: scaffold for %s is not valid Go (check your template): %w", o.Spec.OperationID, err)
		}
		expect := &scaffoldPhases{op: o.Spec.OperationID, impl: o.ImplType()}
		for _, p := range o.Phases {
			expect.methods = append(expect.methods, expectedMethod{name: p.GoName, phase: p.Name, kind: p.kind()})
		}
		if o.renders() {
			expect.methods = append(expect.methods, expectedMethod{name: "Render", kind: finalPhase})
		}
		files = append(files, OutputFile{Path: snake(o.GoName) + "_phases.go", Data: src, Owned: true, phases: expect})
	}
	return files, nil
}

// snake turns a Go name into the snake_case of a file name. An initialism
// stays one word: CreatePayment is create_payment, GetHTTPStatus is
// get_http_status, userID is user_id, ListOrderIDs is list_order_ids.
func snake(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) {
			if i > 0 && startsWord(r, i) {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}

// startsWord reports whether the upper-case letter r[i] (i > 0) starts a
// word: after a lower-case letter or a digit (createPayment, PutV2Order), or
// as the last capital of an initialism when lower case follows (the S of
// HTTPServer), unless that is the initialism's plural s (IDs).
func startsWord(r []rune, i int) bool {
	prev := r[i-1]
	if unicode.IsLower(prev) || unicode.IsDigit(prev) {
		return true
	}
	if !unicode.IsUpper(prev) || i+1 >= len(r) || !unicode.IsLower(r[i+1]) {
		return false
	}
	plural := r[i+1] == 's' && (i+2 == len(r) || !unicode.IsLower(r[i+2]))
	return !plural
}

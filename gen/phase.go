package gen

import (
	"fmt"
	"strings"

	. "github.com/dave/jennifer/jen"
)

// The Go signatures of phases, defined once: the phase interfaces and the
// functions that bind them to the engine (render.go) and the user-owned
// scaffolds (scaffold.go, templates/scaffold.go.tmpl) all write them from
// here.
//
// A phase method gets ctx, what its kind runs with (a local or final phase
// the transaction its commit records it in, a foreign phase the key to send
// to the other system), the request and the state; a final phase also
// returns the operation's response. The engine's idem.Phase takes the same
// function without the request, which the binding closes over.

// goType is a Go type, qualified by the import path of its package ("" for
// a predeclared type or one of the generated package).
type goType struct {
	pkg, name string
	ptr       bool
}

// param is a parameter (or, without a name, a result) of a phase function.
type param struct {
	name string
	typ  goType
}

// signature is a phase function's parameters and results.
type signature struct {
	params, results []param
}

// phaseKind is what a phase's kind decides in its signatures and its doc.
type phaseKind struct {
	field string // the idem.Phase field that runs it
	with  param  // what it runs with, after ctx
	doc   string // what the method's doc says of it
}

var (
	localPhase = phaseKind{"Local", param{"tx", goType{pkg: pkgPgx, name: "Tx"}},
		"local: it runs in tx, whose commit also records this phase as done and saves state."}
	foreignPhase = phaseKind{"Foreign", param{"key", goType{name: "string"}},
		"foreign: it runs outside any transaction. Send key as the other system's idempotency key; it is the same on every retry. What it writes into state is saved by the next phase's commit."}
	finalPhase = phaseKind{"Final", param{"tx", goType{pkg: pkgPgx, name: "Tx"}},
		"final: it runs in tx, which also stores the response it returns; that response is replayed byte for byte to every retry."}
)

func (p *phaseIR) kind() phaseKind {
	switch {
	case p.Final:
		return finalPhase
	case p.Foreign:
		return foreignPhase
	}
	return localPhase
}

var (
	ctxParam  = param{"ctx", goType{pkg: "context", name: "Context"}}
	errResult = param{typ: goType{name: "error"}}
)

// method is the signature of p's method in the operation's phases
// interface.
func (o *opIR) method(p *phaseIR) signature {
	s := signature{
		params:  []param{ctxParam, p.kind().with, {"request", goType{name: o.RequestType}}, o.stateParam()},
		results: []param{errResult},
	}
	if p.Final {
		s.results = []param{{typ: goType{name: o.ResponseType}}, errResult}
	}
	return s
}

// bound is the signature of the idem.Phase function that runs p's method
// for one request.
func (o *opIR) bound(p *phaseIR) signature {
	s := signature{params: []param{ctxParam, p.kind().with, o.stateParam()}, results: []param{errResult}}
	if p.Final {
		s.results = []param{{typ: goType{pkg: pkgIdem, name: "Response", ptr: true}}, errResult}
	}
	return s
}

func (o *opIR) stateParam() param {
	return param{"state", goType{name: o.StateType(), ptr: true}}
}

// code returns t in jennifer.
func (t goType) code() *Statement {
	s := Id(t.name)
	if t.pkg != "" {
		s = Qual(t.pkg, t.name)
	}
	if t.ptr {
		return Op("*").Add(s)
	}
	return s
}

// String returns t as Go source, with its package's name.
func (t goType) String() string {
	s := t.name
	if t.pkg != "" {
		s = importNames[t.pkg] + "." + s
	}
	if t.ptr {
		return "*" + s
	}
	return s
}

// paramsCode returns the parameters in jennifer.
func (s signature) paramsCode() []Code {
	return each(s.params, func(p param) Code { return Id(p.name).Add(p.typ.code()) })
}

// resultsCode returns the results in jennifer.
func (s signature) resultsCode() Code {
	if len(s.results) == 1 {
		return s.results[0].typ.code()
	}
	return Params(each(s.results, func(r param) Code { return r.typ.code() })...)
}

// args returns the parameters' names, to pass them on.
func (s signature) args() []Code {
	return each(s.params, func(p param) Code { return Id(p.name) })
}

// paramsText and resultsText return the signature as Go source, for the
// scaffold template: e.g. "ctx context.Context, tx pgx.Tx" and
// "(CreatePaymentResponseObject, error)".
func (s signature) paramsText() string {
	return strings.Join(each(s.params, func(p param) string { return p.name + " " + p.typ.String() }), ", ")
}

func (s signature) resultsText() string {
	if len(s.results) == 1 {
		return s.results[0].typ.String()
	}
	return "(" + strings.Join(each(s.results, func(r param) string { return r.typ.String() }), ", ") + ")"
}

// each returns f of every parameter.
func each[T any](ps []param, f func(param) T) []T {
	out := make([]T, len(ps))
	for i, p := range ps {
		out[i] = f(p)
	}
	return out
}

// renders reports whether o's replays are rendered again (replay.render).
func (o *opIR) renders() bool { return len(o.X.Replay.Render) > 0 }

// renderMethod is the signature of the Render method of an operation that
// renders its replays.
func (o *opIR) renderMethod() signature {
	return signature{
		params:  []param{ctxParam, {"tx", goType{pkg: pkgPgx, name: "Tx"}}, {"reference", goType{pkg: pkgIdem, name: "Reference"}}},
		results: []param{{typ: goType{name: o.ResponseType}}, errResult},
	}
}

// renderDoc is the doc comment of the Render method.
const renderDoc = "Render renders the answer again for a replay (replay.render): the operation stores only its status, its replay headers and reference, the values at the render pointers of its first answer, and every retry gets what Render returns from them, in tx, a read-only transaction: the resource as it is now. The stored status and headers (Location) replace Render's; Render must not write."

// phaseDoc is the doc comment of p's method, the i-th phase of o.
func phaseDoc(o *opIR, i int, p *phaseIR) string {
	return fmt.Sprintf("%s is phase %d of %d (%q), %s", p.GoName, i+1, len(o.Phases), p.Name, p.kind().doc)
}

package gen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"strings"
)

// scaffoldPhases are the methods an operation's phases need of the
// implementation type its scaffold declares.
type scaffoldPhases struct {
	op      string // the operationId
	impl    string // the implementation type, e.g. CreatePaymentImpl
	methods []expectedMethod
}

type expectedMethod struct {
	name  string // the Go method, e.g. Charge
	phase string // the spec's phase, e.g. charge
	kind  phaseKind
}

// check reads a kept scaffold (src, at path) and says where its
// implementation type no longer matches the spec's phases: a phase with
// no method, a method written for another kind of phase, an exported
// method shaped as a phase that is no phase of the operation (renamed or
// removed in the spec). A file that declares no method on the type (the
// phases implemented elsewhere) is not checked; neither is one that does
// not parse (the build says why).
func (s *scaffoldPhases) check(path string, src []byte) []string {
	if s == nil {
		return nil
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil
	}
	type method struct {
		with    string // the type of the parameter after ctx
		results int
	}
	found := map[string]method{}
	var order []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 || receiverName(fn.Recv.List[0].Type) != s.impl {
			continue
		}
		m := method{}
		if params := paramTypes(fn.Type.Params); len(params) >= 2 {
			m.with = params[1]
		}
		if fn.Type.Results != nil {
			m.results = len(paramTypes(fn.Type.Results))
		}
		found[fn.Name.Name] = m
		order = append(order, fn.Name.Name)
	}
	if len(found) == 0 {
		return nil
	}
	var phases []string
	expected := map[string]bool{}
	for _, e := range s.methods {
		if e.phase != "" {
			phases = append(phases, e.phase)
		}
		expected[e.name] = true
	}
	var out []string
	for i, e := range s.methods {
		m, ok := found[e.name]
		want := e.kind.with.typ.String()
		wantResults := 1
		if e.kind == finalPhase {
			wantResults = 2
		}
		switch {
		case !ok && e.phase == "":
			out = append(out, fmt.Sprintf("%s has no method %s, which replay.render needs to render replays", s.impl, e.name))
		case !ok:
			out = append(out, fmt.Sprintf("%s has no method %s for phase %d of %s, %q (%s): the spec's phases changed since the scaffold was written; add it (go generate writes no scaffold over yours)", s.impl, e.name, i+1, s.op, e.phase, kindName(e.kind)))
		case lastName(m.with) != lastName(want) || m.results != wantResults:
			out = append(out, fmt.Sprintf("%s.%s is not written as phase %q is now (%s: it takes %s after ctx and returns %d value(s)); rewrite it to the signature %sPhases declares", s.impl, e.name, e.phase, kindName(e.kind), want, wantResults, strings.TrimSuffix(s.impl, "Impl")))
		}
	}
	for _, name := range order {
		m := found[name]
		// A Render kept after replay.render was turned off renders the
		// records stored while it was on (idem.KeptRender): no stale phase.
		if expected[name] || name == "Render" || !ast.IsExported(name) || (lastName(m.with) != "Tx" && m.with != "string") {
			continue
		}
		out = append(out, fmt.Sprintf("%s.%s is shaped as a phase but %s has no such phase (its phases: %s): renamed or removed in the spec?", s.impl, name, s.op, strings.Join(phases, ", ")))
	}
	return out
}

// lastName is a type's name without its package (Tx for pgx.Tx, however
// pgx is imported).
func lastName(t string) string {
	if i := strings.LastIndexByte(t, '.'); i >= 0 {
		return t[i+1:]
	}
	return t
}

func kindName(k phaseKind) string {
	return strings.ToLower(k.field)
}

// receiverName is the type name of a method's receiver: T for T and *T.
func receiverName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// paramTypes lists a field list's types, one per parameter.
func paramTypes(l *ast.FieldList) []string {
	var out []string
	for _, f := range l.List {
		n := max(1, len(f.Names))
		for range n {
			out = append(out, types.ExprString(f.Type))
		}
	}
	return out
}

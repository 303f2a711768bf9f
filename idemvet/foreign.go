package idemvet

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/types/typeutil"
)

// checkForeign checks that a foreign phase sends its key, unchanged
// (foreign-key), together with values a resumed attempt sends again
// (foreign-reproducible).
func (c *checker) checkForeign(ph *phase) {
	info := c.pass.TypesInfo
	key := ph.param(1)
	f := &flow{c: c, body: ph.decl.Body, key: key, taint: map[*types.Var]string{}, keyed: map[*types.Var]bool{}}
	if !f.callsOut() {
		return // idemgen's scaffold, a test's fake: no other system to send a key to
	}
	if key == nil {
		c.report(ph.decl.Name, ph, ruleForeignKey, "the key parameter is blank, so the phase cannot send the key idemgen derived for it; "+
			"name it and send it as the other system's idempotency key, so that a resumed execution gets the first call's result instead of a second effect")
		return
	}
	f.solve()

	// The key counts as used where it reaches a send, not where it is
	// merely named (in an error, a log line).
	used := false
	ast.Inspect(ph.decl.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			assignPairs(info, n.Lhs, n.Rhs, func(l, r ast.Expr, _ types.Type) {
				id, ok := ast.Unparen(l).(*ast.Ident)
				if !ok || info.Uses[id] != key || f.derivesKey(r, n.Tok != token.ASSIGN && n.Tok != token.DEFINE) {
					return
				}
				c.report(id, ph, ruleForeignKey, "this replaces %s, the key idemgen derived for the phase, which is the same on every retry: "+
					"a resumed attempt sends another key and the other system performs the effect again; send %[1]s unchanged", key.Name())
			})
		case *ast.CallExpr:
			used = used || f.sends(n)
		}
		return true
	})
	if !used {
		c.report(ph.decl.Name, ph, ruleForeignKey, "the phase never sends %s (naming it in a log or an error does not send it); "+
			"send it as the other system's idempotency key (a header, field or parameter), "+
			"so that a resumed execution gets the first call's result instead of a second effect", key.Name())
	}

	ast.Inspect(ph.decl.Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || !f.sends(call) {
			return true
		}
		for _, a := range call.Args {
			if tv, ok := info.Types[a]; ok && isContext(tv.Type) {
				continue // a deadline or cancellation is not sent
			}
			f.tainted(a, "argument "+types.ExprString(a), func(at ast.Expr, what, src string) {
				c.report(at, ph, ruleReproducible, "%s, sent with %s by %s, is computed from %s, so a resumed attempt sends another value under the same key; "+
					"store it in state in an earlier local phase and send that", what, key.Name(), types.ExprString(call.Fun), src)
			})
		}
		return true
	})
}

// derivesKey reports whether e, assigned to the key (with an operator such
// as += when op), computes the same key on every attempt: from the key
// itself and constants, by computations (key = "pay-" + key).
func (f *flow) derivesKey(e ast.Expr, op bool) bool {
	info := f.c.pass.TypesInfo
	mentions, other := op, false
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			other = true
		case *ast.CallExpr:
			other = other || !f.transforms(n) || f.source(n) != ""
		case *ast.Ident:
			switch obj := info.Uses[n].(type) {
			case *types.Var:
				if obj == f.key {
					mentions = true
				} else if !obj.IsField() {
					other = true // a variable: it may differ between attempts
				}
			}
		}
		return !other
	})
	return mentions && !other
}

// flow follows, within one foreign phase, which variables carry its key
// and which hold values computed from the clock, randomness or a database
// read. Fields count as variables (assigning one field of a struct taints
// that field wherever it is read in the phase), and so does a local
// variable whose field, element or pointee is assigned. Calls are not
// followed into: a call moves what its inputs carry into its result, the
// variables it is given pointers, slices or maps of, and its receiver.
type flow struct {
	c     *checker
	body  *ast.BlockStmt
	key   *types.Var
	taint map[*types.Var]string // what the variable's value is computed from
	keyed map[*types.Var]bool   // the variable's value carries the key
}

// solve propagates to a fixed point; both maps only grow, so it ends.
func (f *flow) solve() {
	info := f.c.pass.TypesInfo
	for changed := true; changed; {
		changed = false
		move := func(to []*types.Var, from ast.Expr) {
			src, keyed := f.taintOf(from), f.carriesKey(from)
			changed = f.mark(to, src, keyed) || changed
		}
		ast.Inspect(f.body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				assignPairs(info, n.Lhs, n.Rhs, func(l, r ast.Expr, _ types.Type) { move(f.targets(l), r) })
			case *ast.ValueSpec:
				assignPairs(info, identExprs(n.Names), n.Values, func(l, r ast.Expr, _ types.Type) { move(f.targets(l), r) })
			case *ast.RangeStmt:
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if e != nil {
						move(f.targets(e), n.X)
					}
				}
			case *ast.CallExpr:
				inputs := n.Args
				var recv ast.Expr
				if se, ok := ast.Unparen(n.Fun).(*ast.SelectorExpr); ok {
					if sel := info.Selections[se]; sel != nil && sel.Kind() == types.MethodVal {
						recv = se.X
						inputs = append([]ast.Expr{recv}, n.Args...)
					}
				}
				src := f.source(n)
				computes := f.transforms(n) && src == ""
				keyed := false
				for _, in := range inputs {
					if src == "" {
						src = f.taintOf(in)
					}
					// Only a computation moves the key into what it writes
					// (req.Header.Set(name, key)); what a send writes back is
					// the other system's answer, and what a read or the
					// clock gives is theirs.
					keyed = keyed || computes && f.carriesKey(in)
				}
				var outs []*types.Var
				for _, a := range n.Args {
					outs = append(outs, f.written(a)...)
				}
				if recv != nil {
					outs = append(outs, f.through(recv)...)
				}
				changed = f.mark(outs, src, keyed) || changed
			}
			return true
		})
	}
}

// mark records src and keyed for vars, except for the key itself (its
// replacement is foreign-key's finding) and contexts (never sent); it
// reports whether anything changed.
func (f *flow) mark(vars []*types.Var, src string, keyed bool) bool {
	changed := false
	for _, v := range vars {
		if v == f.key || isContext(v.Type()) {
			continue
		}
		if src != "" && f.taint[v] == "" {
			f.taint[v] = src
			changed = true
		}
		if keyed && !f.keyed[v] {
			f.keyed[v] = true
			changed = true
		}
	}
	return changed
}

// targets returns the variables an assignment to l changes: the variable,
// or the field and the local variable that holds it.
func (f *flow) targets(l ast.Expr) []*types.Var {
	info := f.c.pass.TypesInfo
	l = ast.Unparen(l)
	if id, ok := l.(*ast.Ident); ok {
		if v := varOf(info, id); v != nil {
			return []*types.Var{v}
		}
		return nil
	}
	var vs []*types.Var
	if se, ok := l.(*ast.SelectorExpr); ok {
		if v, ok := info.Uses[se.Sel].(*types.Var); ok {
			vs = append(vs, v)
		}
	}
	if root := f.root(l); root != nil && f.isLocal(root) {
		vs = append(vs, root)
	}
	return vs
}

// through returns the local variables a method call writes through its
// receiver recv: the variable at its root, or, when the receiver is made
// by calls (json.NewEncoder(&buf)), what those calls were given pointers,
// slices or maps of.
func (f *flow) through(recv ast.Expr) []*types.Var {
	if call, ok := ast.Unparen(recv).(*ast.CallExpr); ok {
		var outs []*types.Var
		for _, a := range call.Args {
			outs = append(outs, f.written(a)...)
		}
		if se, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr); ok && f.c.pass.TypesInfo.Selections[se] != nil {
			outs = append(outs, f.through(se.X)...)
		}
		return outs
	}
	if root := f.root(recv); root != nil && f.isLocal(root) {
		return []*types.Var{root}
	}
	return nil
}

// written returns the variables a call can write through its argument a:
// one passed by pointer, or a local slice, map or pointer.
func (f *flow) written(a ast.Expr) []*types.Var {
	a = ast.Unparen(a)
	if u, ok := a.(*ast.UnaryExpr); ok && u.Op == token.AND {
		return f.targets(u.X)
	}
	if id, ok := a.(*ast.Ident); ok {
		if v := varOf(f.c.pass.TypesInfo, id); v != nil && f.isLocal(v) {
			switch v.Type().Underlying().(type) {
			case *types.Slice, *types.Map, *types.Pointer:
				return []*types.Var{v}
			}
		}
	}
	return nil
}

// root returns the variable at the base of a field, element or pointer
// expression.
func (f *flow) root(e ast.Expr) *types.Var {
	info := f.c.pass.TypesInfo
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		return varOf(info, e)
	case *ast.SelectorExpr:
		if info.Selections[e] != nil {
			return f.root(e.X)
		}
	case *ast.IndexExpr:
		return f.root(e.X)
	case *ast.StarExpr:
		return f.root(e.X)
	}
	return nil
}

// isLocal reports whether v is declared in the phase's body, not a
// parameter, a field or a package-level variable.
func (f *flow) isLocal(v *types.Var) bool {
	return !v.IsField() && f.body.Pos() <= v.Pos() && v.Pos() < f.body.End()
}

// taintOf returns what e's value is computed from, or "".
func (f *flow) taintOf(e ast.Expr) string {
	info := f.c.pass.TypesInfo
	src := ""
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return false // a callback's body is not the value
		case *ast.Ident:
			if v, ok := info.Uses[n].(*types.Var); ok {
				if s := f.taint[v]; s != "" {
					src = s
				} else if v.Pkg() != nil && v.Pkg().Path() == "crypto/rand" && v.Parent() == v.Pkg().Scope() {
					src = "crypto/rand." + v.Name()
				}
			}
		case *ast.CallExpr:
			src = f.source(n)
		}
		return src == ""
	})
	return src
}

// source says what a call's value comes from when it differs between
// attempts: the clock, randomness, a fresh key, or a database read.
func (f *flow) source(call *ast.CallExpr) string {
	fn, ok := typeutil.Callee(f.c.pass.TypesInfo, call).(*types.Func)
	if !ok || fn.Pkg() == nil {
		return ""
	}
	path, name, method := fn.Pkg().Path(), fn.Name(), fn.Signature().Recv() != nil
	switch {
	case path == "time" && !method && oneOf(name, "Now", "Since", "Until"),
		path == "crypto/rand",
		// A generator's constructors are not random; what it yields is.
		(path == "math/rand" || path == "math/rand/v2") && (method || !strings.HasPrefix(name, "New")),
		// NewMD5, NewSHA1 and NewHash derive a UUID from a name.
		path == "github.com/google/uuid" && !method && strings.HasPrefix(name, "New") && !oneOf(name, "NewMD5", "NewSHA1", "NewHash"),
		path == idemclientPath && name == "NewKey":
		return funcName(fn)
	case method && oneOf(name, "Query", "QueryRow", "Exec", "SendBatch", "QueryContext", "QueryRowContext", "ExecContext") &&
		dbHandle(fn.Signature().Recv().Type()) != "",
		// sqlc's queries.
		method && name != "WithTx" && withTx(fn.Signature().Recv().Type()) != nil && takesContext(fn):
		return "a database read, " + types.ExprString(call.Fun)
	}
	return ""
}

// carriesKey reports whether e's value carries the key: it is the key, or
// computed from it by conversions, built-ins, and calls that compute
// rather than send (fmt.Sprintf, strings.Join, the phase's own helpers).
func (f *flow) carriesKey(e ast.Expr) bool {
	info := f.c.pass.TypesInfo
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.CallExpr:
			if !f.transforms(n) || f.source(n) != "" {
				return false // a send's or a read's result is the other system's answer
			}
		case *ast.Ident:
			if v, ok := info.Uses[n].(*types.Var); ok && (v == f.key || f.keyed[v]) {
				found = true
			}
		}
		return !found
	})
	return found
}

// transforms reports whether call computes a value rather than sending
// one: a conversion, a built-in, a standard library function or method
// that does not reach the network, or a static call of a concrete
// function or method that neither reaches the network nor calls what no
// fact describes (the service's own helpers, loggers and metrics, an
// SDK's pointer helpers). A call through an interface or a function value
// may send anything, and so may a function that makes one (an SDK client
// calling its backend).
func (f *flow) transforms(call *ast.CallExpr) bool {
	info := f.c.pass.TypesInfo
	if info.Types[call.Fun].IsType() {
		return true
	}
	switch fn := typeutil.Callee(info, call).(type) {
	case *types.Builtin:
		return true
	case *types.Func:
		switch {
		case fn.Pkg() == nil:
			return true // error's Error
		case isStd(fn.Pkg().Path()):
			return importedVia(f.c.pass, fn.Origin()) == ""
		case typeutil.StaticCallee(info, call) == nil:
			return false // an interface method
		}
		return f.c.netVia(fn.Origin()) == "" && f.c.opaqueVia(fn.Origin()) == ""
	}
	return false
}

// quietPackages log and measure; what they are given is not sent under
// the key.
var quietPackages = []string{
	"go.uber.org/zap", "github.com/rs/zerolog", "github.com/sirupsen/logrus",
	"go.opentelemetry.io/", "github.com/prometheus/",
}

// callsOut reports whether the phase calls something that may reach
// another system: a call that is not a computation, a log or a metric.
func (f *flow) callsOut() bool {
	out := false
	ast.Inspect(f.body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok && f.mayCallOut(call) {
			out = true
		}
		return !out
	})
	return out
}

func (f *flow) mayCallOut(call *ast.CallExpr) bool {
	if f.transforms(call) {
		return false
	}
	fn, ok := typeutil.Callee(f.c.pass.TypesInfo, call).(*types.Func)
	return !ok || fn.Pkg() == nil || !hasPrefix(fn.Pkg().Path(), quietPackages...)
}

// sends reports whether call sends the key: one of its arguments carries it,
// and it is not a computation or a log or metric.
func (f *flow) sends(call *ast.CallExpr) bool {
	if !f.mayCallOut(call) {
		return false
	}
	for _, a := range call.Args {
		if f.carriesKey(a) {
			return true
		}
	}
	return false
}

// tainted calls report for each part of e computed from a source: e
// itself, or the fields and elements of a composite literal.
func (f *flow) tainted(e ast.Expr, what string, report func(at ast.Expr, what, src string)) {
	e = ast.Unparen(e)
	if u, ok := e.(*ast.UnaryExpr); ok && u.Op == token.AND {
		e = ast.Unparen(u.X)
	}
	cl, ok := e.(*ast.CompositeLit)
	if !ok {
		if src := f.taintOf(e); src != "" {
			report(e, what, src)
		}
		return
	}
	t := f.c.pass.TypesInfo.TypeOf(cl)
	if p, ok := t.Underlying().(*types.Pointer); ok {
		t = p.Elem() // an element of []*T written {...} for &T{...}
	}
	st, isStruct := t.Underlying().(*types.Struct)
	for i, elt := range cl.Elts {
		part, v := fmt.Sprintf("element %d", i), elt
		switch kv, ok := elt.(*ast.KeyValueExpr); {
		case ok && isStruct:
			part, v = "field "+types.ExprString(kv.Key), kv.Value
		case ok:
			part, v = "element "+types.ExprString(kv.Key), kv.Value
		case isStruct && i < st.NumFields():
			part = "field " + st.Field(i).Name()
		}
		if strings.HasPrefix(what, "field ") && strings.HasPrefix(part, "field ") {
			part = what + "." + strings.TrimPrefix(part, "field ")
		}
		f.tainted(v, part, report)
	}
}

func isContext(t types.Type) bool { return namedIs(t, "context", "Context") }

// isStd reports whether path is a standard library package: its first
// element has no dot.
func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

package idemvet

import (
	"go/ast"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/analysis"
)

// dbMethods are the methods through which a handle reads or writes the
// database, pgx's names and database/sql's.
var dbMethods = map[string]bool{
	"Exec": true, "Query": true, "QueryRow": true, "SendBatch": true, "CopyFrom": true,
	"Begin": true, "BeginTx": true, "Prepare": true,
	"ExecContext": true, "QueryContext": true, "QueryRowContext": true, "PrepareContext": true,
}

// dbHandle returns how messages name t when it is a handle to the database
// (a pool, a connection, a transaction, or a service's own: an interface
// like sqlc's DBTX, sqlc's Queries), or "".
func dbHandle(t types.Type) string {
	for _, h := range []struct{ path, name string }{
		{pgxPath, "Tx"}, {pgxPath, "Conn"},
		{pgxpoolPath, "Pool"}, {pgxpoolPath, "Conn"},
		{"database/sql", "DB"}, {"database/sql", "Conn"}, {"database/sql", "Tx"},
	} {
		if namedIs(t, h.path, h.name) {
			return typeName(t)
		}
	}
	if isDBTX(t) || withTx(t) != nil {
		return typeName(t)
	}
	return ""
}

func typeName(t types.Type) string {
	return types.TypeString(t, func(p *types.Package) string { return p.Name() })
}

// isDBTX reports whether t is an interface through which queries run, as
// sqlc's DBTX: it has Exec, Query or QueryRow (or database/sql's ...Context
// variants) with pgx's or database/sql's signature. A pool and a
// transaction both satisfy it, so which one it holds decides.
func isDBTX(t types.Type) bool {
	iface, ok := t.Underlying().(*types.Interface)
	if !ok {
		return false
	}
	for m := range iface.Methods() {
		if dbShaped(m) {
			return true
		}
	}
	return false
}

// dbShaped reports whether m is a query method with the signature pgx and
// database/sql give it: (ctx, sql string, args ...any) returning a command
// tag, rows or a row.
func dbShaped(m *types.Func) bool {
	sig := m.Signature()
	params, results := sig.Params(), sig.Results()
	if !dbMethods[m.Name()] || !sig.Variadic() || params.Len() != 3 || results.Len() == 0 ||
		!isContext(params.At(0).Type()) || !types.Identical(params.At(1).Type(), types.Typ[types.String]) {
		return false
	}
	r := results.At(0).Type()
	return namedIs(r, pgconnPath, "CommandTag") || namedIs(r, pgxPath, "Rows") || namedIs(r, pgxPath, "Row") ||
		namedIs(r, "database/sql", "Result") || namedIs(r, "database/sql", "Rows") || namedIs(r, "database/sql", "Row")
}

// withTx returns t's method WithTx(pgx.Tx) T, by which sqlc's Queries run
// in a transaction, or nil. Every other method of such a type taking a
// context runs a query.
func withTx(t types.Type) *types.Func {
	obj, _, _ := types.LookupFieldOrMethod(t, true, nil, "WithTx")
	fn, ok := obj.(*types.Func)
	if !ok {
		return nil
	}
	sig := fn.Signature()
	if sig.Params().Len() != 1 || !namedIs(sig.Params().At(0).Type(), pgxPath, "Tx") || sig.Results().Len() != 1 {
		return nil
	}
	return fn
}

// takesContext reports whether fn's first parameter is a context, as a
// query method's is.
func takesContext(fn *types.Func) bool {
	params := fn.Signature().Params()
	return params.Len() > 0 && isContext(params.At(0).Type())
}

// txBound reports whether a value of type t, read from a transaction, is
// valid only while that transaction is open.
func txBound(t types.Type) bool {
	for _, name := range []string{"Tx", "Rows", "Row", "BatchResults", "Conn", "LargeObjects", "LargeObject"} {
		if namedIs(t, pgxPath, name) {
			return true
		}
	}
	return false
}

// txLike reports whether t is bound to a transaction or is a handle that
// can be built on one (a DBTX, a Queries): what a callback given tx gets.
func txLike(t types.Type) bool {
	return txBound(t) || isDBTX(t) || withTx(t) != nil
}

// canHold reports whether a value of type t can carry a value bound to the
// transaction: it is one, a handle that can be built on it, a function (a
// closure may capture it), or a struct, pointer, slice, array, map or
// channel of one. A field of another type (an int64 beside tx in a struct)
// carries nothing of the struct's tx.
func canHold(t types.Type) bool { return holds(t, map[types.Type]bool{}) }

func holds(t types.Type, seen map[types.Type]bool) bool {
	if txLike(t) {
		return true
	}
	if seen[t] {
		return false
	}
	seen[t] = true
	switch u := t.Underlying().(type) {
	case *types.Signature:
		return true
	case *types.Pointer:
		return holds(u.Elem(), seen)
	case *types.Slice:
		return holds(u.Elem(), seen)
	case *types.Array:
		return holds(u.Elem(), seen)
	case *types.Chan:
		return holds(u.Elem(), seen)
	case *types.Map:
		return holds(u.Key(), seen) || holds(u.Elem(), seen)
	case *types.Struct:
		for f := range u.Fields() {
			if holds(f.Type(), seen) {
				return true
			}
		}
	}
	return false
}

// txValues are the local variables of a phase that hold its transaction or
// something that lives only as long as it: tx itself, a pseudo-nested
// transaction begun from it (by tx.Begin or by a helper given tx), the
// rows, results and connection read through them, handles built on them
// (db.New(tx), q.WithTx(tx)), the parameters of callbacks run with them,
// aliases of those, and closures, composites and local variables that hold
// one. Each maps to how messages say where it comes from.
type txValues struct {
	info  *types.Info
	body  *ast.BlockStmt
	vars  map[*types.Var]string
	owned map[*types.Var]bool           // locals that only hold the phase's own allocations
	lits  map[*types.Var][]*ast.FuncLit // function literals assigned to locals
}

func (c *checker) txValues(ph *phase) *txValues {
	tv := &txValues{info: c.pass.TypesInfo, body: ph.decl.Body, vars: map[*types.Var]string{}}
	tx := ph.param(1)
	if tx == nil {
		return tv
	}
	tv.vars[tx] = "the phase's transaction"
	tv.scan()
	// Assignments may come in any order around loops; iterate to a fixed
	// point, which the monotone map reaches in at most one round per var.
	for changed := true; changed; {
		changed = false
		mark := func(v *types.Var, from string) {
			if v != nil && from != "" && tv.vars[v] == "" {
				tv.vars[v] = from
				changed = true
			}
		}
		assign := func(l, r ast.Expr, t types.Type) {
			if id, ok := ast.Unparen(l).(*ast.Ident); ok {
				mark(varOf(tv.info, id), tv.origin(r, t))
			} else if root := tv.localRoot(l); root != nil {
				// A field or element of the phase's own variable: the
				// variable holds the value now.
				mark(root, tv.holds(r, t))
			}
		}
		ast.Inspect(ph.decl.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				assignPairs(tv.info, n.Lhs, n.Rhs, assign)
			case *ast.ValueSpec:
				assignPairs(tv.info, identExprs(n.Names), n.Values, assign)
			case *ast.CallExpr:
				tv.callbacks(n, mark)
			}
			return true
		})
	}
	return tv
}

// scan records the function literals assigned to the phase's variables,
// and which of its variables only ever hold allocations of the phase's own
// (var m map[K]V, p := &T{}, s := make(...)): writing through those stays
// in the phase, writing through a pointer, slice or map got from elsewhere
// does not.
func (tv *txValues) scan() {
	tv.owned, tv.lits = map[*types.Var]bool{}, map[*types.Var][]*ast.FuncLit{}
	shared := map[*types.Var]bool{}
	assign := func(l, r ast.Expr, multi bool) {
		id, ok := ast.Unparen(l).(*ast.Ident)
		if !ok {
			return
		}
		v := varOf(tv.info, id)
		if v == nil || !tv.isLocal(v) {
			return
		}
		if lit, ok := ast.Unparen(r).(*ast.FuncLit); ok {
			tv.lits[v] = append(tv.lits[v], lit)
		}
		if !multi && fresh(tv.info, r, v) {
			tv.owned[v] = true
		} else {
			shared[v] = true
		}
	}
	ast.Inspect(tv.body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for i, l := range n.Lhs {
				if len(n.Rhs) == len(n.Lhs) {
					assign(l, n.Rhs[i], false)
				} else {
					assign(l, nil, true)
				}
			}
		case *ast.ValueSpec:
			for i, name := range n.Names {
				switch {
				case len(n.Values) == 0:
					if v := varOf(tv.info, name); v != nil {
						tv.owned[v] = true // its zero value
					}
				case len(n.Values) == len(n.Names):
					assign(name, n.Values[i], false)
				default:
					assign(name, nil, true)
				}
			}
		case *ast.RangeStmt:
			for _, e := range []ast.Expr{n.Key, n.Value} {
				if e != nil {
					assign(e, nil, true)
				}
			}
		}
		return true
	})
	for v := range shared {
		delete(tv.owned, v)
	}
}

// fresh reports whether e allocates anew what it gives v: a composite
// literal or its address, make, new, nil, or an append to v itself or to
// something fresh.
func fresh(info *types.Info, e ast.Expr, v *types.Var) bool {
	switch e := ast.Unparen(e).(type) {
	case *ast.CompositeLit:
		return true
	case *ast.UnaryExpr:
		_, ok := ast.Unparen(e.X).(*ast.CompositeLit)
		return e.Op == token.AND && ok
	case *ast.Ident:
		_, ok := info.Uses[e].(*types.Nil)
		return ok
	case *ast.CallExpr:
		id, ok := ast.Unparen(e.Fun).(*ast.Ident)
		if !ok {
			return false
		}
		b, ok := info.Uses[id].(*types.Builtin)
		if !ok {
			return false
		}
		switch b.Name() {
		case "make", "new":
			return true
		case "append":
			if x, ok := ast.Unparen(e.Args[0]).(*ast.Ident); ok && varOf(info, x) == v {
				return true
			}
			return fresh(info, e.Args[0], v)
		}
	}
	return false
}

// isLocal reports whether v is declared in the phase's body (a callback's
// parameter included), not a parameter of the phase, a field or a
// package-level variable.
func (tv *txValues) isLocal(v *types.Var) bool {
	return !v.IsField() && tv.body.Pos() <= v.Pos() && v.Pos() < tv.body.End()
}

// callbacks binds the parameters of function literals that run with the
// transaction. A literal called with a bound value gets it in that
// parameter (run := func(t pgx.Tx) error {...}; run(tx)); one passed to a
// call that is also given a bound value gets, in its parameters of a
// transaction's or a handle's type, what that call derives from it
// (pgx.BeginFunc(ctx, tx, func(tx pgx.Tx) error {...}), a savepoint).
func (tv *txValues) callbacks(call *ast.CallExpr, mark func(*types.Var, string)) {
	for _, lit := range tv.funcLits(call.Fun) {
		params := tv.info.TypeOf(lit).(*types.Signature).Params()
		for i, a := range call.Args {
			if i < params.Len() && txLike(params.At(i).Type()) {
				mark(params.At(i), tv.origin(a, tv.info.TypeOf(a)))
			}
		}
	}
	given := false
	if sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr); ok && tv.info.Selections[sel] != nil {
		given = tv.from(sel.X)
	}
	for _, a := range call.Args {
		given = given || tv.bound(a)
	}
	if !given {
		return
	}
	for _, a := range call.Args {
		for _, lit := range tv.funcLits(a) {
			for p := range tv.info.TypeOf(lit).(*types.Signature).Params().Variables() {
				if txLike(p.Type()) {
					mark(p, "given by "+types.ExprString(call.Fun))
				}
			}
		}
	}
}

// funcLits returns the function literals e may be: e itself, or those
// assigned to the local variable e names.
func (tv *txValues) funcLits(e ast.Expr) []*ast.FuncLit {
	switch e := ast.Unparen(e).(type) {
	case *ast.FuncLit:
		return []*ast.FuncLit{e}
	case *ast.Ident:
		if v := varOf(tv.info, e); v != nil {
			return tv.lits[v]
		}
	}
	return nil
}

// origin says where a value of type t computed by e comes from, if it is
// bound to the transaction: the origin of the value it is, the expression
// it is read from (u.tx), "holds x" when it only carries one (a composite,
// a closure, a slice appended to), or the call that returned it.
func (tv *txValues) origin(e ast.Expr, t types.Type) string {
	if id := tv.escaping(e); id != nil {
		switch {
		case ast.Unparen(e) == id:
			return tv.vars[varOf(tv.info, id)]
		case t != nil && txLike(t):
			return "from " + types.ExprString(e)
		}
		return "holds " + id.Name
	}
	if call, ok := ast.Unparen(e).(*ast.CallExpr); ok && tv.callBound(call, t) {
		return "from " + types.ExprString(call.Fun)
	}
	return ""
}

// holds says what a variable that e's value of type t is stored into now
// holds, or "".
func (tv *txValues) holds(e ast.Expr, t types.Type) string {
	if id := tv.escaping(e); id != nil {
		return "holds " + id.Name
	}
	if call, ok := ast.Unparen(e).(*ast.CallExpr); ok && tv.callBound(call, t) {
		return "holds the " + typeName(t) + " from " + types.ExprString(call.Fun)
	}
	return ""
}

// callBound reports whether call yields, as its value of type t, one bound
// to the transaction: what a method of one returns (tx.Query, tx.Conn()),
// or what any call given one returns that can hold it (db.New(tx),
// q.WithTx(tx), a conversion, a helper's savepoint).
func (tv *txValues) callBound(call *ast.CallExpr, t types.Type) bool {
	if t == nil || !canHold(t) {
		return false
	}
	if sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr); ok && tv.info.Selections[sel] != nil && tv.from(sel.X) {
		return true
	}
	for _, a := range call.Args {
		if tv.bound(a) {
			return true
		}
	}
	return false
}

// bound reports whether e's value is, holds, or is read from one of the
// values.
func (tv *txValues) bound(e ast.Expr) bool {
	return tv.escaping(e) != nil || tv.from(e)
}

// from reports whether e is one of the values, or is read from one of them
// (tx.Conn(), a field or element of a bound composite, db.New(tx)). A field
// that is a handle which cannot hold a transaction (the pool beside tx in
// a struct) is not read from the struct's tx.
func (tv *txValues) from(e ast.Expr) bool {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		v := varOf(tv.info, e)
		return v != nil && tv.vars[v] != ""
	case *ast.SelectorExpr:
		sel := tv.info.Selections[e]
		if sel == nil || sel.Kind() == types.FieldVal && dbHandle(sel.Type()) != "" && !canHold(sel.Type()) {
			return false
		}
		return tv.from(e.X)
	case *ast.CallExpr:
		return tv.callBound(e, tv.info.TypeOf(e))
	case *ast.StarExpr:
		return tv.from(e.X)
	case *ast.IndexExpr:
		return tv.from(e.X)
	case *ast.TypeAssertExpr:
		return tv.from(e.X)
	}
	return false
}

// escaping returns the reference to one of the values that the value of e
// carries with it: the value itself, a field (that can hold it), element
// or method value of it, a pointer to it, a composite or closure holding
// it, or a slice it was appended to.
func (tv *txValues) escaping(e ast.Expr) *ast.Ident {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		if v := varOf(tv.info, e); v != nil && tv.vars[v] != "" {
			return e
		}
	case *ast.SelectorExpr:
		if sel := tv.info.Selections[e]; sel != nil && (sel.Kind() != types.FieldVal || canHold(sel.Type())) {
			return tv.escaping(e.X)
		}
	case *ast.IndexExpr:
		if t := tv.info.TypeOf(e); t != nil && canHold(t) {
			return tv.escaping(e.X)
		}
	case *ast.StarExpr:
		return tv.escaping(e.X)
	case *ast.UnaryExpr:
		if e.Op == token.AND {
			return tv.escaping(e.X)
		}
	case *ast.CompositeLit:
		for _, elt := range e.Elts {
			if kv, ok := elt.(*ast.KeyValueExpr); ok {
				elt = kv.Value
			}
			if id := tv.escaping(elt); id != nil {
				return id
			}
		}
	case *ast.FuncLit:
		return tv.firstUse(e.Body)
	case *ast.CallExpr:
		if tv.info.Types[e.Fun].IsType() && len(e.Args) == 1 {
			return tv.escaping(e.Args[0])
		}
		if isAppend(tv.info, e) {
			for _, a := range e.Args {
				if id := tv.escaping(a); id != nil {
					return id
				}
			}
		}
	}
	return nil
}

// firstUse returns the first reference to one of the values within n.
func (tv *txValues) firstUse(n ast.Node) *ast.Ident {
	var found *ast.Ident
	ast.Inspect(n, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && found == nil {
			if v, ok := tv.info.Uses[id].(*types.Var); ok && tv.vars[v] != "" {
				found = id
			}
		}
		return found == nil
	})
	return found
}

func isAppend(info *types.Info, call *ast.CallExpr) bool {
	id, ok := ast.Unparen(call.Fun).(*ast.Ident)
	if !ok {
		return false
	}
	b, ok := info.Uses[id].(*types.Builtin)
	return ok && b.Name() == "append" && len(call.Args) > 1
}

// localRoot returns the variable of the phase whose own storage an
// assignment to l writes: l is the variable, a field or array element of
// it, or is reached through a pointer, slice or map the variable got from
// an allocation of the phase's own. Anything else (a field of the receiver
// or of state, a package-level variable, what a local pointer got from
// elsewhere) may outlive the phase.
func (tv *txValues) localRoot(l ast.Expr) *types.Var {
	switch l := ast.Unparen(l).(type) {
	case *ast.Ident:
		if v := varOf(tv.info, l); v != nil && tv.isLocal(v) {
			return v
		}
	case *ast.SelectorExpr:
		sel := tv.info.Selections[l]
		if sel == nil || sel.Kind() != types.FieldVal {
			return nil
		}
		if sel.Indirect() {
			return tv.ownedRoot(l.X)
		}
		return tv.localRoot(l.X)
	case *ast.IndexExpr:
		if t := tv.info.TypeOf(l.X); t != nil {
			if _, ok := t.Underlying().(*types.Array); ok {
				return tv.localRoot(l.X)
			}
		}
		return tv.ownedRoot(l.X)
	case *ast.StarExpr:
		return tv.ownedRoot(l.X)
	}
	return nil
}

// ownedRoot returns the local variable e names if it holds only the
// phase's own allocations.
func (tv *txValues) ownedRoot(e ast.Expr) *types.Var {
	if id, ok := ast.Unparen(e).(*ast.Ident); ok {
		if v := varOf(tv.info, id); v != nil && tv.owned[v] {
			return v
		}
	}
	return nil
}

// storesOutside reports whether assigning to l may keep the value beyond
// the phase: l is a package-level variable, or a field, element or
// pointee that is not the phase's own storage (see localRoot). Storing
// into the phase's own variables only makes them hold the value, and
// those are checked in turn.
func (tv *txValues) storesOutside(l ast.Expr) bool {
	switch l := ast.Unparen(l).(type) {
	case *ast.Ident:
		v := varOf(tv.info, l)
		return v != nil && v.Pkg() != nil && v.Parent() == v.Pkg().Scope()
	case *ast.SelectorExpr, *ast.IndexExpr, *ast.StarExpr:
		return tv.localRoot(l) == nil
	}
	return false
}

// checkTxOnly reports database calls of a local or final phase that do not
// go through its tx: they run on a connection of their own, so they do not
// see the phase's writes, and what they write commits on its own,
// surviving the phase's rollback for the retry to write again.
func (c *checker) checkTxOnly(ph *phase, tv *txValues) {
	tx := ph.param(1)
	ast.Inspect(ph.decl.Body, func(n ast.Node) bool {
		se, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		sel := c.pass.TypesInfo.Selections[se]
		if sel == nil || sel.Kind() != types.MethodVal {
			return true
		}
		fn := sel.Obj().(*types.Func)
		recv := fn.Signature().Recv().Type()
		handle, wt := dbHandle(recv), withTx(recv)
		switch {
		case handle == "":
			return true
		case wt != nil:
			if fn.Name() == wt.Name() || !takesContext(fn) {
				return true // sqlc's queries take a context; WithTx binds them
			}
		case !dbMethods[fn.Name()]:
			return true
		}
		if tv.from(se.X) {
			return true
		}
		if _, ok := recv.(*types.Interface); ok {
			handle = typeName(c.pass.TypesInfo.TypeOf(se.X)) // not interface{...}
		}
		what := "a " + handle
		switch {
		case namedIs(recv, pgxPath, "Tx"):
			what = "a pgx.Tx that is not the phase's tx"
		case wt != nil || isDBTX(recv):
			what = "a " + handle + " not built on the phase's tx"
		}
		todo, fixes := c.txFix(tx, se, fn, wt)
		c.reportFix(se, ph, ruleTxOnly, fixes,
			"%s goes through %s, outside the phase's transaction: it does not see the phase's writes, and what it writes survives the phase's rollback and is written again by the retry; %s",
			types.ExprString(se), what, todo)
		return true
	})
}

// txFix says what to do about the call se of method fn, and suggests the
// edit when there is one: send the call through tx when tx has the method
// with the same signature, or bind sqlc's queries to tx with WithTx (wt).
// The edit writes tx's name, so it is offered only where that name refers
// to the phase's tx, not to a callback's parameter that hides it.
func (c *checker) txFix(tx *types.Var, se *ast.SelectorExpr, fn, wt *types.Func) (string, []analysis.SuggestedFix) {
	if tx == nil {
		return "name the phase's tx parameter and use it", nil
	}
	if !c.names(tx, se.Pos()) {
		return "use the phase's " + tx.Name() + " (the name " + tx.Name() + " here is another variable)", nil
	}
	if wt != nil {
		res := wt.Signature().Results().At(0).Type()
		if m, _, _ := types.LookupFieldOrMethod(res, true, fn.Pkg(), fn.Name()); m != nil {
			bound := types.ExprString(se.X) + ".WithTx(" + tx.Name() + ")"
			return "call " + bound + "." + fn.Name() + " instead", []analysis.SuggestedFix{{
				Message:   "Use " + bound + "." + fn.Name(),
				TextEdits: []analysis.TextEdit{{Pos: se.X.End(), End: se.X.End(), NewText: []byte(".WithTx(" + tx.Name() + ")")}},
			}}
		}
		return "use " + tx.Name(), nil
	}
	m, _, _ := types.LookupFieldOrMethod(tx.Type(), false, fn.Pkg(), fn.Name())
	if m, ok := m.(*types.Func); !ok || !types.Identical(m.Type(), fn.Type()) || types.ExprString(se.X) == tx.Name() {
		return "use " + tx.Name(), nil
	}
	return "call " + tx.Name() + "." + fn.Name() + " instead", []analysis.SuggestedFix{{
		Message:   "Use " + tx.Name() + "." + fn.Name(),
		TextEdits: []analysis.TextEdit{{Pos: se.X.Pos(), End: se.X.End(), NewText: []byte(tx.Name())}},
	}}
}

// names reports whether the identifier v.Name() at pos refers to v: no
// closure's parameter or local variable of that name hides it there.
func (c *checker) names(v *types.Var, pos token.Pos) bool {
	scope := c.pass.Pkg.Scope().Innermost(pos)
	if scope == nil {
		return false
	}
	_, obj := scope.LookupParent(v.Name(), pos)
	return obj == v
}

// checkTxEscape reports values bound to the phase's transaction that the
// phase lets outlive it. The engine commits or rolls back right after the
// phase returns; a later use fails, or runs on a connection the pool has
// given to someone else.
func (c *checker) checkTxEscape(ph *phase, tv *txValues) {
	const why = ", but the transaction ends when the phase returns; use it only within the phase"
	name := func(id *ast.Ident) string {
		return id.Name + " (" + tv.vars[varOf(tv.info, id)] + ")"
	}
	ast.Inspect(ph.decl.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			if id := tv.firstUse(n.Call); id != nil {
				c.report(id, ph, ruleTxEscape, "%s is used by a goroutine, which may run after the phase has returned%s", name(id), why)
			}
		case *ast.AssignStmt:
			assignPairs(tv.info, n.Lhs, n.Rhs, func(l, r ast.Expr, t types.Type) {
				if !tv.storesOutside(l) {
					return
				}
				if id := tv.escaping(r); id != nil {
					if call, ok := ast.Unparen(r).(*ast.CallExpr); ok && isAppend(tv.info, call) {
						c.report(id, ph, ruleTxEscape, "%s is appended to %s, which outlives the phase%s", name(id), types.ExprString(l), why)
					} else {
						c.report(id, ph, ruleTxEscape, "%s is stored in %s, which outlives the phase%s", name(id), types.ExprString(l), why)
					}
				} else if from := tv.origin(r, t); from != "" {
					c.report(r, ph, ruleTxEscape, "the %s %s is stored in %s, which outlives the phase%s", typeName(t), from, types.ExprString(l), why)
				}
			})
		case *ast.SendStmt:
			if id := tv.escaping(n.Value); id != nil {
				c.report(id, ph, ruleTxEscape, "%s is sent on %s to whoever receives it after the phase%s", name(id), types.ExprString(n.Chan), why)
			}
		}
		return true
	})
}

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
// (a pool, a connection or a transaction), or "".
func dbHandle(t types.Type) string {
	for _, h := range []struct{ path, name string }{
		{pgxPath, "Tx"}, {pgxPath, "Conn"},
		{pgxpoolPath, "Pool"}, {pgxpoolPath, "Conn"},
		{"database/sql", "DB"}, {"database/sql", "Conn"}, {"database/sql", "Tx"},
	} {
		if namedIs(t, h.path, h.name) {
			return types.TypeString(t, func(p *types.Package) string { return p.Name() })
		}
	}
	return ""
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

// txValues are the local variables of a phase that hold its transaction or
// something that lives only as long as it: tx itself, a pseudo-nested
// transaction begun from it, the rows, results and connection read through
// them, aliases of those, and closures and composites that hold one. Each
// maps to how messages say where it comes from.
type txValues struct {
	info *types.Info
	vars map[*types.Var]string
}

func (c *checker) txValues(ph *phase) *txValues {
	tv := &txValues{info: c.pass.TypesInfo, vars: map[*types.Var]string{}}
	tx := ph.param(1)
	if tx == nil {
		return tv
	}
	tv.vars[tx] = "the phase's transaction"
	// Assignments may come in any order around loops; iterate to a fixed
	// point, which the monotone map reaches in at most one round per var.
	for changed := true; changed; {
		changed = false
		ast.Inspect(ph.decl.Body, func(n ast.Node) bool {
			var lhs, rhs []ast.Expr
			switch n := n.(type) {
			case *ast.AssignStmt:
				lhs, rhs = n.Lhs, n.Rhs
			case *ast.ValueSpec:
				lhs, rhs = identExprs(n.Names), n.Values
			default:
				return true
			}
			assignPairs(lhs, rhs, func(l, r ast.Expr) {
				id, ok := ast.Unparen(l).(*ast.Ident)
				if !ok {
					return
				}
				v := varOf(tv.info, id)
				if v == nil || tv.vars[v] != "" {
					return
				}
				if from := tv.origin(r, v.Type()); from != "" {
					tv.vars[v] = from
					changed = true
				}
			})
			return true
		})
	}
	return tv
}

// origin says where a value of type t computed by e comes from, if it is
// bound to the transaction.
func (tv *txValues) origin(e ast.Expr, t types.Type) string {
	if id := tv.escaping(e); id != nil {
		return tv.vars[varOf(tv.info, id)]
	}
	if call, ok := ast.Unparen(e).(*ast.CallExpr); ok && txBound(t) {
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && tv.from(sel.X) {
			return "from " + types.ExprString(call.Fun)
		}
	}
	return ""
}

// from reports whether e is one of the values, or is read from one of them
// (tx.Conn(), a field of a bound composite).
func (tv *txValues) from(e ast.Expr) bool {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		v := varOf(tv.info, e)
		return v != nil && tv.vars[v] != ""
	case *ast.SelectorExpr:
		return tv.from(e.X)
	case *ast.CallExpr:
		sel, ok := e.Fun.(*ast.SelectorExpr)
		return ok && tv.from(sel.X)
	case *ast.StarExpr:
		return tv.from(e.X)
	}
	return false
}

// escaping returns the reference to one of the values that the value of e
// carries with it: the value itself, a field or method value of it, a
// pointer to it, a composite or closure holding it, or a slice it was
// appended to.
func (tv *txValues) escaping(e ast.Expr) *ast.Ident {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		if v := varOf(tv.info, e); v != nil && tv.vars[v] != "" {
			return e
		}
	case *ast.SelectorExpr:
		if tv.info.Selections[e] != nil {
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
			for _, a := range e.Args[1:] {
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

// checkTxOnly reports database calls of a local or final phase that do not
// go through its tx: they commit on their own, so they survive the phase's
// rollback and the retry repeats them.
func (c *checker) checkTxOnly(ph *phase, tv *txValues) {
	tx := ph.param(1)
	ast.Inspect(ph.decl.Body, func(n ast.Node) bool {
		se, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		sel := c.pass.TypesInfo.Selections[se]
		if sel == nil || sel.Kind() != types.MethodVal || !dbMethods[sel.Obj().Name()] {
			return true
		}
		fn := sel.Obj().(*types.Func)
		recv := fn.Signature().Recv().Type()
		handle := dbHandle(recv)
		if handle == "" || tv.from(se.X) {
			return true
		}
		what := "a " + handle
		if namedIs(recv, pgxPath, "Tx") {
			what = "a pgx.Tx that is not the phase's tx"
		}
		todo := "name the phase's tx parameter and use it"
		var fixes []analysis.SuggestedFix
		if tx != nil {
			todo = "use " + tx.Name()
			m, _, _ := types.LookupFieldOrMethod(tx.Type(), false, fn.Pkg(), fn.Name())
			if m, ok := m.(*types.Func); ok && types.Identical(m.Type(), fn.Type()) {
				todo = "call " + tx.Name() + "." + fn.Name() + " instead"
				fixes = []analysis.SuggestedFix{{
					Message:   "Use " + tx.Name() + "." + fn.Name(),
					TextEdits: []analysis.TextEdit{{Pos: se.X.Pos(), End: se.X.End(), NewText: []byte(tx.Name())}},
				}}
			}
		}
		c.reportFix(se, ph, ruleTxOnly, fixes,
			"%s goes through %s, outside the phase's transaction: its effect survives the phase's rollback and the retry repeats it; %s",
			types.ExprString(se), what, todo)
		return true
	})
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
			if len(n.Lhs) != len(n.Rhs) {
				return true // the results of one call: not tx itself
			}
			for i, l := range n.Lhs {
				r := n.Rhs[i]
				id := tv.escaping(r)
				if id == nil {
					continue
				}
				if call, ok := ast.Unparen(r).(*ast.CallExpr); ok && isAppend(tv.info, call) {
					c.report(id, ph, ruleTxEscape, "%s is appended to %s, which outlives the phase%s", name(id), types.ExprString(l), why)
				} else if c.storesOutside(l) {
					c.report(id, ph, ruleTxEscape, "%s is stored in %s, which outlives the phase%s", name(id), types.ExprString(l), why)
				}
			}
		case *ast.SendStmt:
			if id := tv.escaping(n.Value); id != nil {
				c.report(id, ph, ruleTxEscape, "%s is sent on %s to whoever receives it after the phase%s", name(id), types.ExprString(n.Chan), why)
			}
		}
		return true
	})
}

// storesOutside reports whether assigning to l may keep the value beyond
// the phase: l is a field, an element of a map, slice or array, a pointer's
// target, or a package-level variable.
func (c *checker) storesOutside(l ast.Expr) bool {
	switch l := ast.Unparen(l).(type) {
	case *ast.Ident:
		v := varOf(c.pass.TypesInfo, l)
		return v != nil && v.Pkg() != nil && v.Parent() == v.Pkg().Scope()
	case *ast.SelectorExpr, *ast.IndexExpr, *ast.StarExpr:
		return true
	}
	return false
}

package idemvet

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"strings"
)

// checkStateOrder reports, for the phases of each operation a type
// implements, a read of a state field that no earlier phase writes (rule
// state-order).
func (c *checker) checkStateOrder() {
	for _, im := range c.implementations {
		order := im.of.Order
		if len(order) < 2 || len(im.methods) != len(order) {
			// One phase hands nothing on; and where some phases are
			// declared elsewhere, their writes are not seen.
			continue
		}
		ops := make([]*phase, len(order))
		for i, name := range order {
			ops[i] = im.methods[name]
		}
		accesses := make([]stateAccess, len(ops))
		for i, ph := range ops {
			accesses[i] = c.stateAccess(ph)
		}
		written := map[string]bool{}
		for i, ph := range ops {
			a := accesses[i]
			for _, r := range a.reads {
				if written[r.field] || a.writes[r.field] || a.all {
					continue
				}
				later := ""
				for j := i + 1; j < len(ops); j++ {
					if accesses[j].writes[r.field] {
						later = fmt.Sprintf("; %s writes it, but runs after", ops[j].name)
						break
					}
				}
				c.report(r.sel, ph, ruleStateOrder, "reads state.%s, which no earlier phase writes (the phases in the spec's order: %s)%s: it reads the zero value; reorder the phases in the spec, or set the field before", r.field, strings.Join(order, ", "), later)
			}
			if a.all {
				break // every field may be set from here on
			}
			for f := range a.writes {
				written[f] = true
			}
		}
	}
}

// stateAccess is what a phase does with its state's fields.
type stateAccess struct {
	reads  []fieldRead     // in the order of the body
	writes map[string]bool // fields written
	all    bool            // the state as a whole is handed on: any field may be written
}

type fieldRead struct {
	field string
	sel   *ast.SelectorExpr
}

func (c *checker) stateAccess(ph *phase) stateAccess {
	a := stateAccess{writes: map[string]bool{}}
	if ph.sig.Params().Len() < 4 {
		return a // a render: it has no state
	}
	state := ph.param(3)
	if state == nil {
		return a
	}
	info := c.pass.TypesInfo
	// field returns the state field e names (state.F, or a part of it:
	// state.F.G, state.F[i]), or "".
	var field func(e ast.Expr) (string, *ast.SelectorExpr)
	field = func(e ast.Expr) (string, *ast.SelectorExpr) {
		switch x := ast.Unparen(e).(type) {
		case *ast.SelectorExpr:
			if id, ok := ast.Unparen(x.X).(*ast.Ident); ok && info.Uses[id] == state {
				if sel := info.Selections[x]; sel != nil && sel.Kind() == types.FieldVal {
					return x.Sel.Name, x
				}
				return "", nil
			}
			return field(x.X)
		case *ast.IndexExpr:
			return field(x.X)
		case *ast.StarExpr:
			return field(x.X)
		}
		return "", nil
	}
	writes := map[*ast.SelectorExpr]bool{}
	write := func(e ast.Expr) {
		if f, sel := field(e); sel != nil {
			a.writes[f] = true
			writes[sel] = true
		}
	}
	ast.Inspect(ph.decl.Body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.AssignStmt:
			for _, l := range x.Lhs {
				write(l)
			}
		case *ast.IncDecStmt:
			write(x.X)
		case *ast.UnaryExpr:
			if x.Op == token.AND {
				write(x.X)
			}
		case *ast.CallExpr:
			// A method of a field (state.Items.Add(...)) may change it.
			if s, ok := ast.Unparen(x.Fun).(*ast.SelectorExpr); ok {
				if sel := info.Selections[s]; sel != nil && sel.Kind() == types.MethodVal {
					write(s.X)
				}
			}
		}
		return true
	})
	ast.Inspect(ph.decl.Body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.SelectorExpr:
			if id, ok := ast.Unparen(x.X).(*ast.Ident); ok && info.Uses[id] == state {
				sel := info.Selections[x]
				switch {
				case sel == nil || sel.Kind() != types.FieldVal:
					a.all = true // a method of the state itself
				case !writes[x]:
					a.reads = append(a.reads, fieldRead{x.Sel.Name, x})
				}
				return false
			}
		case *ast.Ident:
			if info.Uses[x] == state {
				a.all = true // the state handed on whole
			}
		}
		return true
	})
	return a
}

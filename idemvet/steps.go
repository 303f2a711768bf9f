package idemvet

import (
	"go/ast"
	"go/constant"
	"go/types"
	"strings"

	"golang.org/x/tools/go/types/typeutil"
)

const idemPath = "github.com/idemgen/idemgen/runtime/idem"

// checkSteps checks the steps a handler takes (idem.Local, idem.Foreign):
// a resumed run of the handler must take the same steps, under the same
// names, in the same order (rule step-determinism). It reports a step
// whose name is not a constant, a name two steps of one function share, a
// step taken in a loop (its name repeats, or the number of steps depends
// on the data), and a step taken or skipped on a condition that reads the
// clock or randomness.
func (c *checker) checkSteps() {
	for _, f := range c.pass.Files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			c.checkStepsIn(fd)
		}
	}
}

func (c *checker) checkStepsIn(fd *ast.FuncDecl) {
	names := map[string]bool{}
	// The conditions on the clock or randomness that may end the function
	// early (an if or switch whose body returns): a step after one is taken
	// or not depending on them.
	type guard struct {
		stmt ast.Node
		why  string
	}
	var guards []guard
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		var conds []ast.Expr
		var body ast.Node
		switch x := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.IfStmt:
			conds, body = []ast.Expr{x.Cond}, x
		case *ast.SwitchStmt:
			body = x
			if x.Tag != nil {
				conds = append(conds, x.Tag)
			}
			for _, cc := range x.Body.List {
				conds = append(conds, cc.(*ast.CaseClause).List...)
			}
		default:
			return true
		}
		for _, cond := range conds {
			if why := c.unstable(cond); why != "" && returns(body) {
				guards = append(guards, guard{body, why})
				break
			}
		}
		return true
	})
	var stack []ast.Node
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		stack = append(stack, n)
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		step, nameArg := c.stepCall(call)
		if step == "" {
			return true
		}
		where := fd.Name.Name
		tv := c.pass.TypesInfo.Types[call.Args[nameArg]]
		switch {
		case tv.Value == nil || tv.Value.Kind() != constant.String:
			c.reportStep(call.Args[nameArg], where, "the name of this idem.%s is not a constant: a resumed run finds its step by name and order, so the name must be the same on every run", step)
		case names[constant.StringVal(tv.Value)]:
			c.reportStep(call.Args[nameArg], where, "step %q is taken twice in %s: every step needs a name of its own (the run fails on the second)", constant.StringVal(tv.Value), where)
		default:
			names[constant.StringVal(tv.Value)] = true
		}
		for _, outer := range stack[:len(stack)-1] {
			switch outer.(type) {
			case *ast.ForStmt, *ast.RangeStmt:
				c.reportStep(call, where, "idem.%s is taken in a loop: its name repeats on the second iteration, and the number of steps depends on the data; take the loop inside one step", step)
			}
		}
		// In a branch of a guard (the innermost), or else after one that
		// may return (the nearest).
		why := ""
		for _, g := range guards {
			if contains(g.stmt, call) {
				why = g.why
			}
		}
		for i := len(guards) - 1; why == "" && i >= 0; i-- {
			if guards[i].stmt.End() <= call.Pos() {
				why = guards[i].why
			}
		}
		if why != "" {
			c.reportStep(call, where, "whether idem.%s is taken depends on %s: a resumed run may take other steps than the record's and fail; decide from the request or a step's result", step, why)
		}
		return true
	})
}

// reportStep reports a step-determinism finding in the function named where.
func (c *checker) reportStep(n ast.Node, where, format string, args ...any) {
	c.report(n, &phase{name: where}, ruleStepDeterminism, format, args...)
}

// stepCall says whether call is idem.Local or idem.Foreign, and where its
// name argument is.
func (c *checker) stepCall(call *ast.CallExpr) (string, int) {
	fun := ast.Unparen(call.Fun)
	if ix, ok := fun.(*ast.IndexExpr); ok {
		fun = ix.X
	}
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok {
		return "", 0
	}
	fn, ok := c.pass.TypesInfo.Uses[sel.Sel].(*types.Func)
	if !ok || fn.Pkg() == nil || fn.Pkg().Path() != idemPath {
		return "", 0
	}
	switch {
	case fn.Name() == "Local" && len(call.Args) == 4:
		return "Local", 2
	case fn.Name() == "Foreign" && len(call.Args) == 3:
		return "Foreign", 1
	}
	return "", 0
}

// unstable says what of the clock or randomness cond reads, or "".
func (c *checker) unstable(cond ast.Expr) string {
	why := ""
	ast.Inspect(cond, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || why != "" {
			return why == ""
		}
		if fn, ok := typeutil.Callee(c.pass.TypesInfo, call).(*types.Func); ok && fn.Pkg() != nil {
			path := fn.Pkg().Path()
			switch {
			case path == "time" && (fn.Name() == "Now" || fn.Name() == "Since" || fn.Name() == "Until"):
				why = "the clock (time." + fn.Name() + ")"
			case path == "math/rand" || path == "math/rand/v2" || path == "crypto/rand":
				why = "randomness (" + strings.TrimPrefix(path, "math/") + "." + fn.Name() + ")"
			}
		}
		return why == ""
	})
	return why
}

// returns reports whether a return statement lies in n (not in a closure).
func returns(n ast.Node) bool {
	found := false
	ast.Inspect(n, func(m ast.Node) bool {
		switch m.(type) {
		case *ast.FuncLit:
			return false
		case *ast.ReturnStmt:
			found = true
		}
		return !found
	})
	return found
}

// contains reports whether n lies within outer.
func contains(outer, n ast.Node) bool {
	return outer.Pos() <= n.Pos() && n.End() <= outer.End()
}

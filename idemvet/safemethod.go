package idemvet

import (
	"go/ast"
	"go/constant"
	"go/types"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/tools/go/types/typeutil"
)

// routesFact marks an interface of a generated server whose methods'
// comments give their routes: oapi-codegen's StrictServerInterface and
// ServerInterface ("(GET /unsubscribe)") and idemgen's PlainHandlers
// ("GET /unsubscribe"). It tells the packages that implement the interface
// which of their methods serve a GET.
type routesFact struct {
	Routes []route // sorted by Name
}

type route struct {
	Name         string // the interface's method
	Method, Path string // GET, /unsubscribe
}

func (*routesFact) AFact() {}

func (f *routesFact) String() string {
	parts := make([]string, len(f.Routes))
	for i, r := range f.Routes {
		parts[i] = r.Name + "=" + r.Method + " " + r.Path
	}
	return "routes " + strings.Join(parts, ", ")
}

// routeLine is a comment line that gives a route, oapi-codegen's
// "(GET /path)" or idemgen's "GET /path".
var routeLine = regexp.MustCompile(`^\(?(GET|HEAD|OPTIONS|TRACE|POST|PUT|PATCH|DELETE) (/\S*?)\)?$`)

// safeMethodDoc is where a reader learns to turn a GET that changes state
// into a POST.
const safeMethodDoc = `docs/testing.md, "A GET that changes state"`

// safeMethods are the methods a request of which must change nothing
// (RFC 9110, 9.2.1); "" is net/http's GET.
var safeMethods = map[string]bool{"": true, "GET": true, "HEAD": true, "OPTIONS": true, "TRACE": true}

// exportRouteInterfaces marks the interfaces of this package's generated
// files whose methods' comments give their routes. Only generated files
// count: a service's own interface with such comments says nothing about
// the spec.
func (c *checker) exportRouteInterfaces() {
	for _, f := range c.pass.Files {
		if !ast.IsGenerated(f) {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			it, ok := ts.Type.(*ast.InterfaceType)
			obj, _ := c.pass.TypesInfo.Defs[ts.Name].(*types.TypeName)
			if !ok || obj == nil {
				return false
			}
			fact := new(routesFact)
			for _, m := range it.Methods.List {
				if len(m.Names) != 1 || m.Doc == nil {
					continue
				}
				for line := range strings.SplitSeq(m.Doc.Text(), "\n") {
					if r := routeLine.FindStringSubmatch(strings.TrimSpace(line)); r != nil {
						fact.Routes = append(fact.Routes, route{m.Names[0].Name, r[1], r[2]})
						break
					}
				}
			}
			if len(fact.Routes) > 0 {
				sort.Slice(fact.Routes, func(i, j int) bool { return fact.Routes[i].Name < fact.Routes[j].Name })
				c.pass.ExportObjectFact(obj, fact)
			}
			return false
		})
	}
}

// A handler is a method of this package that serves an operation of a
// safe method: a strict handler, or a kept one.
type handler struct {
	*phase // name: Type.Method (GET /path)
	method string
}

// handlers returns the methods, declared in this package outside
// generated files, that serve a GET, HEAD, OPTIONS or TRACE operation: the
// methods of this package's types that implement a route interface (see
// routesFact), this package's or an imported one's, found as phases are.
func (c *checker) handlers() []handler {
	ifaces := factTypes[*routesFact](c.pass)
	if len(ifaces) == 0 {
		return nil
	}
	generated := map[string]bool{}
	for _, f := range c.pass.Files {
		if ast.IsGenerated(f) {
			generated[c.pass.Fset.File(f.FileStart).Name()] = true
		}
	}
	decls := c.methodDecls()
	var out []handler
	seen := map[*types.Func]bool{}
	for _, named := range c.candidates() {
		ptr := types.NewPointer(named)
		for _, in := range ifaces {
			if !types.Implements(ptr, in.obj.Type().Underlying().(*types.Interface)) {
				continue
			}
			for _, r := range in.fact.Routes {
				if !safeMethods[r.Method] {
					continue
				}
				obj, _, _ := types.LookupFieldOrMethod(ptr, false, in.obj.Pkg(), r.Name)
				fn, ok := obj.(*types.Func)
				if !ok {
					continue
				}
				fn = fn.Origin()
				fd := decls[fn]
				if fd == nil || seen[fn] || generated[c.pass.Fset.File(fd.Pos()).Name()] {
					continue // another package's, found already, or the generated glue's
				}
				seen[fn] = true
				out = append(out, handler{&phase{name: recvName(fd) + "." + fn.Name() + " (" + r.Method + " " + r.Path + ")", decl: fd, sig: fn.Signature()}, r.Method})
			}
		}
	}
	return out
}

// checkSafeMethod reports the calls of the handler of a safe method that
// change state: a write to the database, a call of another system with a
// method that is not safe, or a call of a function that makes one.
func (c *checker) checkSafeMethod(h handler) {
	article := "a"
	if h.method == "OPTIONS" {
		article = "an"
	}
	ast.Inspect(h.decl.Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		what, via := c.callEffect(call, h.decl.Body)
		if what == "" {
			return true
		}
		if via != "" {
			what += " (via " + via + ")"
		}
		c.report(call.Fun, h.phase, ruleSafeMethod, "%s %s, but %s %s request must change nothing: mail scanners, link previewers and prefetchers send it unasked; "+
			"answer it with a page whose form POSTs, and make the change in that POST (%s)",
			types.ExprString(call.Fun), what, article, h.method, safeMethodDoc)
		return true
	})
}

// effectFact marks a function or concrete method that changes state
// outside the process, directly or through the functions it calls: it
// writes to the database, or calls another system with a method that is
// not safe. What says which, Via names the call that does it.
type effectFact struct {
	What, Via string
}

func (*effectFact) AFact() {}

func (f *effectFact) String() string { return "changes state: " + f.What + " via " + f.Via }

// computeEffects finds the functions of this package that change state
// (see effectFact), following calls within the package to a fixed point
// and calls into dependencies through their facts, and exports a fact for
// each exported one but phases: only those can be called from another
// package, and phases are called through their interface, which no fact
// follows. It
// also finds the functions that return a request made with a method that
// is not safe, for callEffect to follow. The standard library and the
// database drivers are judged at their call sites (http.Post, Exec), not
// by their bodies.
func (c *checker) computeEffects(phases []*phase) {
	c.effects, c.requests = map[*types.Func]effectFact{}, map[*types.Func]string{}
	if path := c.pass.Pkg.Path(); isStd(path) || isDatabasePkg(path) {
		return
	}
	type fnBody struct {
		fn   *types.Func
		body *ast.BlockStmt
	}
	var funcs []fnBody
	for _, f := range c.pass.Files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				if fn, ok := c.pass.TypesInfo.Defs[fd.Name].(*types.Func); ok {
					funcs = append(funcs, fnBody{fn, fd.Body})
				}
			}
		}
	}
	// Each map only grows, so each loop ends.
	for changed := true; changed; {
		changed = false
		for _, f := range funcs {
			if c.requests[f.fn] != "" || !returnsRequest(f.fn) {
				continue
			}
			ast.Inspect(f.body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.FuncLit:
					return false // its returns are its own
				case *ast.ReturnStmt:
					for _, r := range n.Results {
						if m := c.unsafeMethod(f.body, r, map[*types.Var]bool{}); m != "" && c.requests[f.fn] == "" {
							c.requests[f.fn] = m
							changed = true
						}
					}
				}
				return true
			})
		}
	}
	for changed := true; changed; {
		changed = false
		for _, f := range funcs {
			if c.effects[f.fn].What != "" {
				continue
			}
			ast.Inspect(f.body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || c.effects[f.fn].What != "" {
					return c.effects[f.fn].What == ""
				}
				if what, via := c.callEffect(call, f.body); what != "" {
					if via == "" {
						via = funcName(typeutil.Callee(c.pass.TypesInfo, call).(*types.Func).Origin())
					}
					c.effects[f.fn] = effectFact{what, via}
					changed = true
				}
				return true
			})
		}
	}
	isPhase := map[*types.Func]bool{}
	for _, ph := range phases {
		if fn, ok := c.pass.TypesInfo.Defs[ph.decl.Name].(*types.Func); ok {
			isPhase[fn] = true
		}
	}
	for _, f := range funcs {
		if e := c.effects[f.fn]; e.What != "" && f.fn.Exported() && !isPhase[f.fn] {
			c.pass.ExportObjectFact(f.fn, &e)
		}
	}
}

// callEffect says how call, in a function whose body is body, changes
// state, or "": it writes to the database (see dbWrite), it is http.Post
// or PostForm, it sends a request made with a method that is not safe to
// something that reaches the network ((*http.Client).Do, or a helper that
// calls it), or it calls a function that changes state. via names the
// call that does it when that is not call itself.
func (c *checker) callEffect(call *ast.CallExpr, body *ast.BlockStmt) (what, via string) {
	fn, ok := typeutil.Callee(c.pass.TypesInfo, call).(*types.Func)
	if !ok {
		return "", ""
	}
	fn = fn.Origin()
	if c.dbWrite(call, fn, body) {
		return "writes to the database", ""
	}
	if fn.Pkg() != nil && fn.Pkg().Path() == "net/http" && oneOf(recvTypeName(fn.Signature()), "", "Client") && oneOf(fn.Name(), "Post", "PostForm") {
		return "calls another system with POST", ""
	}
	if v := c.netVia(fn); v != "" {
		for _, a := range call.Args {
			if t := c.pass.TypesInfo.TypeOf(a); t == nil || !namedIs(t, "net/http", "Request") {
				continue
			}
			if m := c.unsafeMethod(body, a, map[*types.Var]bool{}); m != "" {
				if v == funcName(fn) {
					v = ""
				}
				return "calls another system with " + m, v
			}
		}
	}
	var e effectFact
	if fn.Pkg() == c.pass.Pkg {
		e = c.effects[fn]
	} else if fn.Pkg() != nil {
		c.pass.ImportObjectFact(fn, &e)
	}
	return e.What, e.Via
}

// dbWrite reports whether call, of fn, writes to the database: CopyFrom on
// a handle (see dbHandle); Exec, or a SendBatch of statements queued in
// body, unless the statements are constants that write nothing (SET LOCAL,
// a SELECT); Query or QueryRow of a constant statement that writes
// (INSERT ... RETURNING). What a method of sqlc's Queries runs is in its
// body, followed as any function's.
func (c *checker) dbWrite(call *ast.CallExpr, fn *types.Func, body *ast.BlockStmt) bool {
	recv := fn.Signature().Recv()
	if recv == nil || dbHandle(recv.Type()) == "" {
		return false
	}
	switch fn.Name() {
	case "CopyFrom":
		return true
	case "Exec", "ExecContext":
		sql, ok := c.sqlArg(call, fn)
		return !ok || sqlWrites(sql)
	case "Query", "QueryRow", "QueryContext", "QueryRowContext":
		sql, ok := c.sqlArg(call, fn)
		return ok && sqlWrites(sql)
	case "SendBatch":
		return c.batchWrites(body)
	}
	return false
}

// sqlArg returns the constant statement call passes fn, its first string
// parameter, and whether it is a constant.
func (c *checker) sqlArg(call *ast.CallExpr, fn *types.Func) (string, bool) {
	params := fn.Signature().Params()
	for i := 0; i < params.Len() && i < len(call.Args); i++ {
		if !types.Identical(params.At(i).Type(), types.Typ[types.String]) {
			continue
		}
		if tv := c.pass.TypesInfo.Types[call.Args[i]]; tv.Value != nil && tv.Value.Kind() == constant.String {
			return constant.StringVal(tv.Value), true
		}
		return "", false
	}
	return "", false
}

// batchWrites reports whether a batch sent in body may write: a statement
// queued on a pgx.Batch there writes or is not a constant, or none is
// queued there (the batch was made elsewhere).
func (c *checker) batchWrites(body *ast.BlockStmt) bool {
	queued, writes := false, false
	ast.Inspect(body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return !writes
		}
		fn, ok := typeutil.Callee(c.pass.TypesInfo, call).(*types.Func)
		if !ok || fn.Name() != "Queue" || fn.Signature().Recv() == nil || !namedIs(fn.Signature().Recv().Type(), pgxPath, "Batch") {
			return true
		}
		queued = true
		sql, ok := c.sqlArg(call, fn)
		writes = !ok || sqlWrites(sql)
		return !writes
	})
	return writes || !queued
}

// writeWords are the SQL keywords of statements that change what is
// stored.
var writeWords = map[string]bool{
	"INSERT": true, "UPDATE": true, "DELETE": true, "MERGE": true, "TRUNCATE": true,
	"CREATE": true, "ALTER": true, "DROP": true,
}

// sqlWrites reports whether a statement writes: one of writeWords appears
// in it outside comments, string literals and quoted identifiers, UPDATE
// other than a row lock's (FOR UPDATE, FOR NO KEY UPDATE).
func sqlWrites(sql string) bool {
	prev := ""
	for i := 0; i < len(sql); {
		ch := sql[i]
		switch {
		case strings.HasPrefix(sql[i:], "--"):
			i = skipPast(sql, i+2, "\n")
		case strings.HasPrefix(sql[i:], "/*"):
			i = skipPast(sql, i+2, "*/")
		case ch == '\'' || ch == '"':
			i = skipPast(sql, i+1, string(ch)) // '' and "" reopen: the same skip
		case ch == '$':
			// A dollar-quoted string, $$...$$ or $tag$...$tag$; or $1.
			j := i + 1
			for j < len(sql) && isWordByte(sql[j]) && (j > i+1 || sql[j] < '0' || sql[j] > '9') {
				j++
			}
			if j < len(sql) && sql[j] == '$' {
				i = skipPast(sql, j+1, sql[i:j+1])
			} else {
				i = j
			}
		case isWordByte(ch):
			j := i
			for j < len(sql) && isWordByte(sql[j]) {
				j++
			}
			w := strings.ToUpper(sql[i:j])
			if writeWords[w] && (w != "UPDATE" || prev != "FOR" && prev != "KEY") {
				return true
			}
			prev, i = w, j
		default:
			i++
		}
	}
	return false
}

// skipPast returns the index after the first end at or after i, or
// len(s).
func skipPast(s string, i int, end string) int {
	if k := strings.Index(s[i:], end); k >= 0 {
		return i + k + len(end)
	}
	return len(s)
}

func isWordByte(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= 0x80
}

// unsafeMethod returns the method, if it is not safe, of the request e
// evaluates to in body, or "" when it is safe or cannot be told: made by
// http.NewRequest or NewRequestWithContext with a constant method, by a
// composite literal, by a function of this package that returns one (see
// computeEffects), or a copy of one (WithContext, Clone); a variable's
// value is followed through its assignments in body, including to its
// field Method. seen keeps a variable from being followed twice.
func (c *checker) unsafeMethod(body *ast.BlockStmt, e ast.Expr, seen map[*types.Var]bool) string {
	info := c.pass.TypesInfo
	constMethod := func(e ast.Expr) string {
		tv := info.Types[e]
		if tv.Value == nil || tv.Value.Kind() != constant.String {
			return ""
		}
		if m := strings.ToUpper(constant.StringVal(tv.Value)); !safeMethods[m] {
			return m
		}
		return ""
	}
	switch e := ast.Unparen(e).(type) {
	case *ast.CallExpr:
		fn, ok := typeutil.Callee(info, e).(*types.Func)
		if !ok {
			return ""
		}
		fn = fn.Origin()
		if fn.Pkg() != nil && fn.Pkg().Path() == "net/http" {
			recv := recvTypeName(fn.Signature())
			switch {
			case recv == "" && fn.Name() == "NewRequest" && len(e.Args) > 0:
				return constMethod(e.Args[0])
			case recv == "" && fn.Name() == "NewRequestWithContext" && len(e.Args) > 1:
				return constMethod(e.Args[1])
			case recv == "Request" && oneOf(fn.Name(), "WithContext", "Clone"):
				if se, ok := ast.Unparen(e.Fun).(*ast.SelectorExpr); ok {
					return c.unsafeMethod(body, se.X, seen)
				}
			}
			return ""
		}
		if fn.Pkg() == c.pass.Pkg {
			return c.requests[fn]
		}
	case *ast.UnaryExpr:
		return c.unsafeMethod(body, e.X, seen)
	case *ast.CompositeLit:
		if namedIs(info.TypeOf(e), "net/http", "Request") {
			for _, elt := range e.Elts {
				if kv, ok := elt.(*ast.KeyValueExpr); ok && types.ExprString(kv.Key) == "Method" {
					return constMethod(kv.Value)
				}
			}
		}
	case *ast.Ident:
		v := varOf(info, e)
		if v == nil || seen[v] || v.Pos() < body.Pos() || v.Pos() >= body.End() {
			return "" // a parameter, whose caller says, or a package's variable
		}
		seen[v] = true
		m := ""
		assign := func(l, r ast.Expr, _ types.Type) {
			switch l := ast.Unparen(l).(type) {
			case *ast.Ident:
				if varOf(info, l) == v && m == "" {
					m = c.unsafeMethod(body, r, seen)
				}
			case *ast.SelectorExpr:
				if id, ok := ast.Unparen(l.X).(*ast.Ident); ok && l.Sel.Name == "Method" && varOf(info, id) == v && m == "" {
					m = constMethod(r)
				}
			}
		}
		ast.Inspect(body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				assignPairs(info, n.Lhs, n.Rhs, assign)
			case *ast.ValueSpec:
				assignPairs(info, identExprs(n.Names), n.Values, assign)
			}
			return m == ""
		})
		return m
	}
	return ""
}

// returnsRequest reports whether fn returns an *http.Request.
func returnsRequest(fn *types.Func) bool {
	for v := range fn.Signature().Results().Variables() {
		if namedIs(v.Type(), "net/http", "Request") {
			return true
		}
	}
	return false
}

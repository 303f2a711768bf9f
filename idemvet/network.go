package idemvet

import (
	"go/ast"
	"go/types"
	"slices"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"
)

// netFact marks a function or concrete method that reaches the network,
// directly or through the functions it calls, so that a phase calling it
// from another package is caught. Via names the call that does.
type netFact struct {
	Via string
}

func (*netFact) AFact() {}

func (f *netFact) String() string { return "reaches the network via " + f.Via }

// queuePackages are message-queue clients: every method of their types,
// and their Dial and Connect functions, talk to a broker.
var queuePackages = map[string]bool{
	"github.com/segmentio/kafka-go":                       true,
	"github.com/IBM/sarama":                               true,
	"github.com/Shopify/sarama":                           true,
	"github.com/nats-io/nats.go":                          true,
	"github.com/nats-io/nats.go/jetstream":                true,
	"github.com/rabbitmq/amqp091-go":                      true,
	"github.com/streadway/amqp":                           true,
	"github.com/aws/aws-sdk-go-v2/service/sqs":            true,
	"github.com/aws/aws-sdk-go-v2/service/sns":            true,
	"github.com/aws/aws-sdk-go/service/sqs":               true,
	"github.com/aws/aws-sdk-go/service/sns":               true,
	"cloud.google.com/go/pubsub":                          true,
	"cloud.google.com/go/pubsub/v2":                       true,
	"github.com/confluentinc/confluent-kafka-go/kafka":    true,
	"github.com/confluentinc/confluent-kafka-go/v2/kafka": true,
}

// sendsDirectly reports whether a call of fn is itself a call over the
// network. It also matches interface methods, the one kind of dynamic call
// whose effect is known from its signature.
func sendsDirectly(fn *types.Func) bool {
	if fn.Pkg() == nil {
		return false
	}
	sig := fn.Signature()
	name, recv := fn.Name(), recvTypeName(sig)
	// Do or RoundTrip of an *http.Request sends it, whoever implements it:
	// http.Client, a RoundTripper, idemclient's Doer, oapi-codegen's
	// HttpRequestDoer.
	if recv != "" && (name == "Do" || name == "RoundTrip") && sig.Params().Len() == 1 &&
		namedIs(sig.Params().At(0).Type(), "net/http", "Request") {
		return true
	}
	switch path := fn.Pkg().Path(); path {
	case "net/http":
		return (recv == "" || recv == "Client") && oneOf(name, "Get", "Head", "Post", "PostForm")
	case "net":
		return recv == "" && hasPrefix(name, "Dial", "Listen", "Lookup") ||
			oneOf(recv, "Dialer", "Resolver", "ListenConfig")
	case "net/smtp":
		return recv == "" && oneOf(name, "Dial", "SendMail") || recv == "Client"
	case idemclientPath:
		// Conditional.Confirm reads the resource back from its server.
		return recv != "" && oneOf(name, "Do", "RoundTrip", "Confirm")
	case "google.golang.org/grpc":
		return recv == "" && oneOf(name, "Dial", "DialContext", "NewClient") || oneOf(name, "Invoke", "NewStream")
	default:
		return queuePackages[path] && (recv != "" || hasPrefix(name, "Dial", "Connect"))
	}
}

// isDatabasePkg reports whether path is a database driver or interface: the
// database is the one system a local phase reaches, through tx (rule
// tx-only says which handle), so a driver's own dialing is not network
// here.
func isDatabasePkg(path string) bool {
	return path == "database/sql" || strings.HasPrefix(path, "database/sql/") ||
		strings.HasPrefix(path, "github.com/jackc/") || path == "github.com/lib/pq"
}

// computeNetwork finds the functions of this package that reach the
// network, and those that call what no fact can describe (opaque), and
// exports a fact for each. A function reaches the network when its body
// (closures included) calls a function that does, and is opaque when it
// makes an opaque call (see opaqueCall) or calls a function that is;
// calls within the package are followed to a fixed point, calls into
// dependencies through their facts. Each function records the first such
// call in source order, so the output is stable.
func computeNetwork(pass *analysis.Pass) (net, opaque map[*types.Func]string) {
	net, opaque = map[*types.Func]string{}, map[*types.Func]string{}
	if isDatabasePkg(pass.Pkg.Path()) {
		return net, opaque
	}
	// What the standard library, a logger or metrics package calls through
	// interfaces does not make their calls sends.
	seesOpaque := !isStd(pass.Pkg.Path()) && !hasPrefix(pass.Pkg.Path(), quietPackages...)
	type fnCalls struct {
		fn    *types.Func
		local []*types.Func // callees declared in this package, in call order
	}
	var funcs []fnCalls
	for _, f := range pass.Files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			fn, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func)
			if !ok {
				continue
			}
			fc := fnCalls{fn: fn}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				if seesOpaque && opaque[fn] == "" {
					opaque[fn] = opaqueCall(pass.TypesInfo, call, fd.Body)
				}
				callee, ok := typeutil.Callee(pass.TypesInfo, call).(*types.Func)
				if !ok {
					return true
				}
				callee = callee.Origin()
				if callee.Pkg() == pass.Pkg && !sendsDirectly(callee) {
					fc.local = append(fc.local, callee)
					return true
				}
				if v := importedVia(pass, callee); v != "" && net[fn] == "" {
					net[fn] = v
				}
				if seesOpaque && opaque[fn] == "" {
					opaque[fn] = importedOpaque(pass, callee)
				}
				return true
			})
			funcs = append(funcs, fc)
		}
	}
	for _, via := range []map[*types.Func]string{net, opaque} {
		for changed := true; changed; {
			changed = false
			for _, fc := range funcs {
				if via[fc.fn] != "" {
					continue
				}
				for _, callee := range fc.local {
					if v := via[callee]; v != "" {
						via[fc.fn] = v
						changed = true
						break
					}
				}
			}
		}
	}
	for _, fc := range funcs {
		if v := net[fc.fn]; v != "" {
			pass.ExportObjectFact(fc.fn, &netFact{Via: v})
		}
		if v := opaque[fc.fn]; v != "" {
			pass.ExportObjectFact(fc.fn, &opaqueFact{Via: v})
		}
	}
	return net, opaque
}

// opaqueFact marks a function or concrete method that calls, directly or
// through the functions it calls, what no fact describes: an interface's
// method or a function value, which may reach another system (an SDK's
// backend: stripe-go's Backend.Call). A foreign phase's call of it may
// send what it is given. Via names the call.
type opaqueFact struct {
	Via string
}

func (*opaqueFact) AFact() {}

func (f *opaqueFact) String() string { return "calls out of sight via " + f.Via }

// opaqueCall says what call reaches that no fact can describe, or "": a
// method of an interface (other than the standard library's, a database's,
// a logger's or metrics', and other than Do and RoundTrip, which send),
// or a function value other than a closure of body's own.
func opaqueCall(info *types.Info, call *ast.CallExpr, body *ast.BlockStmt) string {
	if info.Types[call.Fun].IsType() {
		return ""
	}
	switch callee := typeutil.Callee(info, call).(type) {
	case *types.Builtin:
		return ""
	case *types.Func:
		if typeutil.StaticCallee(info, call) != nil || callee.Pkg() == nil || sendsDirectly(callee) || dbShaped(callee) {
			return ""
		}
		if p := callee.Pkg().Path(); isStd(p) || isDatabasePkg(p) || hasPrefix(p, quietPackages...) {
			return ""
		}
		return funcName(callee)
	case *types.Var:
		if body.Pos() <= callee.Pos() && callee.Pos() < body.End() {
			return "" // a closure of its own, seen in its body
		}
		return "the function value " + callee.Name()
	case nil:
		if _, ok := ast.Unparen(call.Fun).(*ast.FuncLit); ok {
			return ""
		}
		return "the function value " + types.ExprString(call.Fun)
	}
	return ""
}

// importedOpaque says through what a callee outside this package is
// opaque, or "".
func importedOpaque(pass *analysis.Pass, fn *types.Func) string {
	if fn.Pkg() == nil || fn.Pkg() == pass.Pkg {
		return ""
	}
	var f opaqueFact
	if pass.ImportObjectFact(fn, &f) {
		return f.Via
	}
	return ""
}

// importedVia says through what a callee outside this package (or a
// network call of this package's own) reaches the network, or "".
func importedVia(pass *analysis.Pass, fn *types.Func) string {
	if sendsDirectly(fn) {
		return funcName(fn)
	}
	if fn.Pkg() == nil || fn.Pkg() == pass.Pkg || isDatabasePkg(fn.Pkg().Path()) {
		return ""
	}
	var f netFact
	if pass.ImportObjectFact(fn, &f) {
		return f.Via
	}
	return ""
}

// netVia says through what a call of fn reaches the network, or "": its
// package's own functions by what computeNetwork found, others by their
// facts.
func (c *checker) netVia(fn *types.Func) string {
	if fn.Pkg() != c.pass.Pkg || sendsDirectly(fn) {
		return importedVia(c.pass, fn)
	}
	return c.net[fn]
}

// opaqueVia says through what a call of fn calls what no fact describes,
// or "".
func (c *checker) opaqueVia(fn *types.Func) string {
	if fn.Pkg() == c.pass.Pkg {
		return c.opaque[fn]
	}
	return importedOpaque(c.pass, fn)
}

// checkNetwork reports the calls of a local or final phase that reach the
// network: its transaction may roll back after the call, and the retry
// calls again.
func (c *checker) checkNetwork(ph *phase) {
	ast.Inspect(ph.decl.Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		fn, ok := typeutil.Callee(c.pass.TypesInfo, call).(*types.Func)
		if !ok {
			return true
		}
		fn = fn.Origin()
		v := c.netVia(fn)
		if v == "" {
			return true
		}
		what := types.ExprString(call.Fun) + " reaches the network"
		if v != funcName(fn) {
			what += " (via " + v + ")"
		}
		c.report(call.Fun, ph, ruleNoNetwork, "%s, which happens again each time the phase's transaction rolls back and is retried; "+
			"call other systems from a foreign phase under its key, or write an outbox row through tx", what)
		return true
	})
}

// recvTypeName is the name of the type sig is a method of, or "".
func recvTypeName(sig *types.Signature) string {
	recv := sig.Recv()
	if recv == nil {
		return ""
	}
	t := recv.Type()
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := types.Unalias(t).(*types.Named); ok {
		return n.Obj().Name()
	}
	return ""
}

func oneOf(s string, set ...string) bool { return slices.Contains(set, s) }

func hasPrefix(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

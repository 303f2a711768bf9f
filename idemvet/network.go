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
// network and exports a fact for each. A function reaches it when its body
// (closures included) calls a function that does; calls within the package
// are followed to a fixed point, calls into dependencies through their
// facts. Each function records the first such call in source order, so the
// output is stable.
func computeNetwork(pass *analysis.Pass) map[*types.Func]string {
	via := map[*types.Func]string{}
	if isDatabasePkg(pass.Pkg.Path()) {
		return via
	}
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
				callee, ok := typeutil.Callee(pass.TypesInfo, call).(*types.Func)
				if !ok {
					return true
				}
				callee = callee.Origin()
				if callee.Pkg() == pass.Pkg && !sendsDirectly(callee) {
					fc.local = append(fc.local, callee)
				} else if v := importedVia(pass, callee); v != "" && via[fn] == "" {
					via[fn] = v
				}
				return true
			})
			funcs = append(funcs, fc)
		}
	}
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
	for _, fc := range funcs {
		if v := via[fc.fn]; v != "" {
			pass.ExportObjectFact(fc.fn, &netFact{Via: v})
		}
	}
	return via
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
		v := c.net[fn]
		if fn.Pkg() != c.pass.Pkg || sendsDirectly(fn) {
			v = importedVia(c.pass, fn)
		}
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

package gen

import (
	"fmt"
	"go/ast"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgen/idemgen/spec"
)

// ir is the intermediate representation the renderers work from.
type ir struct {
	Package  string
	SpecFile string
	Server   server // the router the glue serves, as the config chooses
	// MiddlewareFirstToLast: the config has oapi-codegen apply the
	// Middlewares of the net/http, chi or gorilla server last to first
	// (compatibility apply-chi- or apply-gorilla-middleware-first-to-last).
	MiddlewareFirstToLast bool
	// RefusalStatuses are the config's refusal-statuses.
	RefusalStatuses map[string]int
	// Preset is the config's preset ("" for none).
	Preset     string
	Idempotent []*opIR    // in spec order
	Plain      []*plainIR // in spec order
	// Served is every operation served, idempotent or plain, in spec order.
	Served []served
	// MiddlewareKeys are the keys of oapi-codegen's OperationMiddlewares of
	// every operation served: operationIds (or, without one, oapi-codegen's
	// name for it).
	MiddlewareKeys []string
}

// opIR is one idempotent operation.
type opIR struct {
	Spec         *spec.Operation
	X            *spec.Extension
	GoName       string // the strict server method, e.g. CreatePayment
	RequestType  string // e.g. CreatePaymentRequestObject
	ResponseType string // e.g. CreatePaymentResponseObject
	VisitMethod  string // e.g. VisitCreatePaymentResponse
	Phases       []*phaseIR
}

// Names the glue and scaffolds declare for one operation.
func (o *opIR) PhasesIface() string { return o.GoName + "Phases" }
func (o *opIR) StateType() string   { return o.GoName + "State" }
func (o *opIR) ImplType() string    { return o.GoName + "Impl" }

// handlerFunc names the function that binds the strict handler of an
// operation that keeps it (x-idempotency handler: true) to a request.
func (o *opIR) handlerFunc() string { return o.GoName + "Handler" }

// answerFunc names the function with which a phase before the last
// answers with the operation's typed response.
func (o *opIR) answerFunc() string { return o.GoName + "Answer" }

// Names the glue declares for one operation: the operation's x-idempotency as
// the runtime takes it, and the response object that writes the engine's
// outcome (unexported); the function that binds its phases to a request and
// the one that returns its operation (exported, so that a test runs the
// phases as the glue does: idemtest.Check).
func (o *opIR) idempotencyVar() string { return lowerFirst(o.GoName) + "Idempotency" }
func (o *opIR) outcomeType() string    { return lowerFirst(o.GoName) + "Outcome" }
func (o *opIR) bindFunc() string       { return o.GoName + "PhaseList" }
func (o *opIR) operationFunc() string  { return o.GoName + "Operation" }

type phaseIR struct {
	Name    string // as in the spec, e.g. charge_card
	GoName  string // e.g. ChargeCard
	Foreign bool
	Final   bool
}

type plainIR struct {
	GoName, RequestType, ResponseType string
	Method, Path                      string
	OperationID                       string // may be empty
	Summary                           string
	// Precondition names the required precondition header (If-None-Match,
	// If-Match) of a PUT or DELETE: a conditional write, whose client method
	// reads the resource back after a 412 on a retry. "" otherwise.
	Precondition string
}

// name is how comments name the operation: its operationId, or its route.
func (p *plainIR) name() string {
	if p.OperationID == "" {
		return nobreak(p.Method + " " + p.Path)
	}
	return p.OperationID
}

// served is one operation served: idempotent (idem) or plain.
type served struct {
	idem  *opIR
	plain *plainIR
}

// route returns the operation's "METHOD /path".
func (s served) route() string {
	if s.idem != nil {
		return route(s.idem)
	}
	return s.plain.Method + " " + s.plain.Path
}

// strictMethod is one method of oapi-codegen's StrictServerInterface.
type strictMethod struct {
	name, request, response, visit string
}

var routeComment = regexp.MustCompile(`\((\w+) (\S+)\)`)

// strictMethods reads oapi-codegen's output and maps "METHOD /path" to the
// strict server method that serves it. Reading the generated code, rather
// than re-deriving oapi-codegen's naming rules, keeps the two in step (and
// in glue-only mode follows the user's oapi-codegen, whatever its version
// or options). It also returns every name the files declare at package
// level.
func strictMethods(files []Source, srv server) (map[string]strictMethod, map[string]bool, error) {
	declared := map[string]bool{}
	visits := map[string]string{} // response interface -> its Visit method
	var strict *ast.InterfaceType
	for _, src := range files {
		d, err := readDecls(src.Name, src.Data, func(name string) bool {
			return name == "StrictServerInterface" || strings.HasSuffix(name, "ResponseObject")
		})
		if err != nil {
			return nil, nil, err
		}
		maps.Copy(declared, d.declared)
		for _, decl := range d.file.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, s := range g.Specs {
				s, ok := s.(*ast.TypeSpec)
				if !ok {
					continue
				}
				it, ok := s.Type.(*ast.InterfaceType)
				if !ok {
					continue
				}
				if s.Name.Name == "StrictServerInterface" {
					strict = it
				} else if len(it.Methods.List) == 1 && len(it.Methods.List[0].Names) == 1 {
					visits[s.Name.Name] = it.Methods.List[0].Names[0].Name
				}
			}
		}
	}
	var missing []string
	for _, name := range append([]string{"StrictServerInterface", "StrictMiddlewareFunc"}, serverDecls[srv]...) {
		if !declared[name] {
			missing = append(missing, name)
		}
	}
	if strict == nil || len(missing) > 0 {
		var names []string
		for _, f := range files {
			names = append(names, f.Name)
		}
		return nil, nil, fmt.Errorf("gen: oapi-codegen's generated code (%s) lacks %s: idemgen's glue for the config's %s needs oapi-codegen's %s and strict server (generate: {%s: true, strict-server: true})%s",
			orNone(names), strings.Join(missing, ", "), srv, srv, srv, serverNote[srv])
	}
	out := map[string]strictMethod{}
	for _, m := range strict.Methods.List {
		ft, ok := m.Type.(*ast.FuncType)
		if !ok || len(m.Names) != 1 || m.Doc == nil || len(ft.Params.List) != 2 || ft.Results == nil || len(ft.Results.List) != 2 {
			continue
		}
		match := routeComment.FindStringSubmatch(m.Doc.Text())
		if match == nil {
			continue
		}
		req, _ := ft.Params.List[1].Type.(*ast.Ident)
		resp, _ := ft.Results.List[0].Type.(*ast.Ident)
		if req == nil || resp == nil {
			continue
		}
		out[match[1]+" "+match[2]] = strictMethod{name: m.Names[0].Name, request: req.Name, response: resp.Name, visit: visits[resp.Name]}
	}
	return out, declared, nil
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "no generated Go file"
	}
	return strings.Join(names, ", ")
}

func buildIR(cfg *Config, doc *spec.Document, sources []Source) (*ir, error) {
	srv, err := cfg.glueServer()
	if err != nil {
		return nil, err
	}
	if srv == "" {
		return nil, fmt.Errorf("gen: the config generates no strict server that idemgen's glue serves: set generate.%s", supportedServers)
	}
	methods, declared, err := strictMethods(sources, srv)
	if err != nil {
		return nil, err
	}
	r := &ir{Package: cfg.Package(), SpecFile: cfg.Spec, Server: srv, RefusalStatuses: cfg.RefusalStatuses, Preset: cfg.Preset}
	switch compat := cfg.Codegen.Compatibility; srv {
	case serverStd, serverChi:
		r.MiddlewareFirstToLast = compat.ApplyChiMiddlewareFirstToLast
	case serverGorilla:
		r.MiddlewareFirstToLast = compat.ApplyGorillaMiddlewareFirstToLast
	}
	var errs spec.Errors
	for _, op := range doc.Operations {
		m, ok := methods[op.Method+" "+op.Path]
		switch {
		case ok && m.visit != "":
		case excluded(cfg, op) && op.Idempotency == nil:
			continue // left out of the strict server by the output options
		case excluded(cfg, op):
			errs = append(errs, &spec.Error{File: cfg.Spec, Method: op.Method, Path: op.Path, OperationID: op.OperationID, Field: spec.ExtensionName,
				Message: "the config's output options (include/exclude tags or operation ids) leave this operation out of the strict server, so it cannot be idempotent; include it or remove x-idempotency"})
			continue
		default:
			return nil, fmt.Errorf("gen: oapi-codegen generated no strict handler for %s %s", op.Method, op.Path)
		}
		key := op.OperationID
		if key == "" {
			key = m.name
		}
		r.MiddlewareKeys = append(r.MiddlewareKeys, key)
		if op.Idempotency == nil {
			p := &plainIR{GoName: m.name, RequestType: m.request, ResponseType: m.response, Method: op.Method, Path: op.Path,
				OperationID: op.OperationID, Summary: op.Op.Summary, Precondition: precondition(op)}
			r.Plain = append(r.Plain, p)
			r.Served = append(r.Served, served{plain: p})
			continue
		}
		o := &opIR{Spec: op, X: op.Idempotency, GoName: m.name, RequestType: m.request, ResponseType: m.response, VisitMethod: m.visit}
		seen := map[string]string{}
		for i, ph := range op.Idempotency.Phases {
			p := &phaseIR{Name: ph.Name, GoName: camel(ph.Name), Foreign: ph.Foreign, Final: i == len(op.Idempotency.Phases)-1}
			if other, dup := seen[p.GoName]; dup {
				errs = append(errs, &spec.Error{File: cfg.Spec, Method: op.Method, Path: op.Path, OperationID: op.OperationID,
					Field: spec.ExtensionName + ".phases", Message: fmt.Sprintf("phases %q and %q both become the Go method %s; rename one", other, ph.Name, p.GoName)})
			}
			seen[p.GoName] = ph.Name
			o.Phases = append(o.Phases, p)
		}
		names := []string{o.PhasesIface(), o.StateType(), o.ImplType(), o.idempotencyVar(), o.bindFunc(), o.answerFunc(), o.operationFunc(), o.outcomeType()}
		if o.X.Handler {
			o.Phases = nil
			names = []string{o.idempotencyVar(), o.handlerFunc(), o.operationFunc(), o.outcomeType()}
		}
		for _, name := range names {
			if declared[name] {
				errs = append(errs, &spec.Error{File: cfg.Spec, Method: op.Method, Path: op.Path, OperationID: op.OperationID,
					Message: fmt.Sprintf("the generated name %s is already declared by a schema or type of this spec; rename the operationId or the schema", name)})
			}
		}
		r.Idempotent = append(r.Idempotent, o)
		r.Served = append(r.Served, served{idem: o})
	}
	for _, name := range []string{"Phases", "PlainHandlers", "Register", "RegisterWithOptions", "RegisterOptions"} {
		if declared[name] && len(r.Idempotent) > 0 {
			errs = append(errs, &spec.Error{File: cfg.Spec, Message: fmt.Sprintf("the spec declares a type named %s, which idemgen generates; rename the schema", name)})
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return r, nil
}

// serverDecls are what the glue of each server uses of oapi-codegen's
// output besides the strict server interface.
var serverDecls = map[server][]string{
	serverEcho:    {"NewStrictHandler", "EchoRouter", "RegisterHandlersWithOptions", "RegisterHandlersOptions"},
	serverStd:     {"NewStrictHandlerWithOptions", "StrictHTTPServerOptions", "ServeMux", "HandlerWithOptions", "StdHTTPServerOptions", "MiddlewareFunc"},
	serverChi:     {"NewStrictHandlerWithOptions", "StrictHTTPServerOptions", "HandlerWithOptions", "ChiServerOptions", "MiddlewareFunc"},
	serverGorilla: {"NewStrictHandlerWithOptions", "StrictHTTPServerOptions", "HandlerWithOptions", "GorillaServerOptions", "MiddlewareFunc"},
	serverGin:     {"NewStrictHandler", "RegisterHandlersWithOptions", "GinServerOptions", "MiddlewareFunc"},
}

// serverNote is what an error about a missing declaration adds for a
// server.
var serverNote = map[server]string{
	serverEcho: " from a release that has RegisterHandlersOptions.OperationMiddlewares",
}

// camel turns a snake_case phase name into an exported Go name.
func camel(s string) string {
	var b strings.Builder
	up := true
	for _, r := range s {
		if r == '_' {
			up = true
			continue
		}
		if up {
			b.WriteRune(unicode.ToUpper(r))
			up = false
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	r[0] = unicode.ToLower(r[0])
	return string(r)
}

// excluded reports whether the config's output options leave op out of
// oapi-codegen's output (include or exclude by tag or operationId).
func excluded(cfg *Config, op *spec.Operation) bool {
	o := cfg.Codegen.OutputOptions
	anyTag := func(tags []string) bool {
		for _, t := range op.Op.Tags {
			if slices.Contains(tags, t) {
				return true
			}
		}
		return false
	}
	return (len(o.IncludeTags) > 0 && !anyTag(o.IncludeTags)) || anyTag(o.ExcludeTags) ||
		(len(o.IncludeOperationIDs) > 0 && !slices.Contains(o.IncludeOperationIDs, op.OperationID)) ||
		slices.Contains(o.ExcludeOperationIDs, op.OperationID)
}

// precondition is the required If-None-Match or If-Match header of a PUT or
// DELETE operation, as the spec names it; "" when it has none.
func precondition(op *spec.Operation) string {
	if op.Method != "PUT" && op.Method != "DELETE" {
		return ""
	}
	for _, p := range op.Op.Parameters {
		if v := p.Value; v != nil && v.In == openapi3.ParameterInHeader && v.Required &&
			(strings.EqualFold(v.Name, "If-None-Match") || strings.EqualFold(v.Name, "If-Match")) {
			return v.Name
		}
	}
	return ""
}

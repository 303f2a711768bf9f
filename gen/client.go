package gen

import (
	"fmt"
	"go/ast"
	"go/types"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	. "github.com/dave/jennifer/jen"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"

	"github.com/idemgen/idemgen/spec"
)

const pkgIdemClient = "github.com/idemgen/idemgen/runtime/idemclient"

// The files of the client package, under Config.ClientOut.
const (
	clientFile     = "client.gen.go"     // oapi-codegen's models and typed client
	idemClientFile = "idempotent.gen.go" // the idempotent wrapper
)

// mintedKeyLength is the length of idemclient.NewKey's keys.
const mintedKeyLength = 36

// clientPackage returns the client package's name: ClientPackage, or the
// last element of ClientOut.
func clientPackage(cfg *Config) (string, error) {
	name := cfg.ClientPackage
	if name == "" {
		name = filepath.Base(filepath.Clean(cfg.ClientOut))
	}
	if !packageName.MatchString(name) {
		return "", fmt.Errorf("gen: client package name %q is not a valid Go package name; set client-package", name)
	}
	return name, nil
}

// generateClient renders the client package: oapi-codegen's models and
// typed client, and idemgen's idempotent wrapper around it.
func generateClient(cfg *Config, in *Input, doc *openapi3.T, r *ir) ([]OutputFile, error) {
	pkg, err := clientPackage(cfg)
	if err != nil {
		return nil, err
	}
	client, err := runCodegen(cfg, in, doc, codegen.GenerateOptions{Client: true, Models: true}, pkg)
	if err != nil {
		return nil, err
	}
	cs, err := clientMethods(client)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"IdempotentClient", "NewIdempotentClient"} {
		if cs.declared[name] {
			return nil, spec.Errors{&spec.Error{File: cfg.Spec, Message: fmt.Sprintf("the spec declares a type named %s, which idemgen generates for the client; rename the schema", name)}}
		}
	}
	wrapper, err := renderClient(pkg, r, cs)
	if err != nil {
		return nil, err
	}
	return []OutputFile{
		{Path: filepath.Join(cfg.ClientOut, clientFile), Data: client},
		{Path: filepath.Join(cfg.ClientOut, idemClientFile), Data: wrapper},
	}, nil
}

// clientMethod is one method of oapi-codegen's ClientWithResponsesInterface.
type clientMethod struct {
	name   string       // e.g. CreatePaymentWithResponse
	params []*ast.Field // after ctx, before reqEditors
	result ast.Expr     // e.g. *CreatePaymentResponse
}

type clientSource struct {
	byRoute  map[string][]clientMethod // "METHOD /path" -> its methods, in oapi-codegen's order
	imports  map[string]string         // package name in the file -> import path
	declared map[string]bool
}

// clientRoute finds the route in the doc comment of a client method; the
// last one, as a summary may mention others.
var clientRoute = regexp.MustCompile("(?:Corresponds with|performs a) ([A-Z]+) (\\S+) \\(the `")

// clientMethods reads oapi-codegen's client and maps each route to the
// methods of ClientWithResponsesInterface that call it. As for the server,
// the generated code is read rather than oapi-codegen's naming predicted.
func clientMethods(src []byte) (*clientSource, error) {
	d, err := readDecls(clientFile, src, func(name string) bool { return name == "ClientWithResponsesInterface" })
	if err != nil {
		return nil, err
	}
	cs := &clientSource{byRoute: map[string][]clientMethod{}, imports: map[string]string{}, declared: d.declared}
	for _, imp := range d.file.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		cs.imports[name] = path
	}
	var iface *ast.InterfaceType
	for _, decl := range d.file.Decls {
		if g, ok := decl.(*ast.GenDecl); ok {
			for _, s := range g.Specs {
				if s, ok := s.(*ast.TypeSpec); ok {
					iface, _ = s.Type.(*ast.InterfaceType)
				}
			}
		}
	}
	if iface == nil {
		return nil, fmt.Errorf("gen: oapi-codegen's client has no ClientWithResponsesInterface")
	}
	for _, m := range iface.Methods.List {
		ft, ok := m.Type.(*ast.FuncType)
		if !ok || len(m.Names) != 1 || m.Doc == nil || ft.Results == nil || len(ft.Results.List) != 2 {
			continue
		}
		routes := clientRoute.FindAllStringSubmatch(m.Doc.Text(), -1)
		if routes == nil {
			continue
		}
		route := routes[len(routes)-1]
		var params []*ast.Field
		for _, p := range ft.Params.List {
			for _, n := range p.Names {
				params = append(params, &ast.Field{Names: []*ast.Ident{n}, Type: p.Type})
			}
		}
		// ctx first and reqEditors last, as oapi-codegen always writes them.
		if len(params) < 2 || params[0].Names[0].Name != "ctx" {
			return nil, fmt.Errorf("gen: oapi-codegen's %s does not start with ctx", m.Names[0].Name)
		}
		if _, ok := params[len(params)-1].Type.(*ast.Ellipsis); !ok {
			return nil, fmt.Errorf("gen: oapi-codegen's %s does not end with request editors", m.Names[0].Name)
		}
		key := route[1] + " " + route[2]
		cs.byRoute[key] = append(cs.byRoute[key], clientMethod{name: m.Names[0].Name, params: params[1 : len(params)-1], result: ft.Results.List[0].Type})
	}
	return cs, nil
}

// typeCode writes a type expression of oapi-codegen's client in jennifer,
// qualifying imported names so that the wrapper imports what it uses.
func (cs *clientSource) typeCode(e ast.Expr) (Code, error) {
	switch e := e.(type) {
	case *ast.Ident:
		return Id(e.Name), nil
	case *ast.StarExpr:
		x, err := cs.typeCode(e.X)
		return Op("*").Add(x), err
	case *ast.SelectorExpr:
		pkg, ok := e.X.(*ast.Ident)
		if !ok || cs.imports[pkg.Name] == "" {
			break
		}
		return Qual(cs.imports[pkg.Name], e.Sel.Name), nil
	case *ast.ArrayType:
		if e.Len != nil {
			break
		}
		x, err := cs.typeCode(e.Elt)
		return Index().Add(x), err
	case *ast.MapType:
		k, err := cs.typeCode(e.Key)
		if err != nil {
			return nil, err
		}
		v, err := cs.typeCode(e.Value)
		return Map(k).Add(v), err
	case *ast.InterfaceType:
		if len(e.Methods.List) == 0 {
			return Interface(), nil
		}
	}
	return nil, fmt.Errorf("gen: oapi-codegen's client uses a parameter type idemgen cannot copy (%T)", e)
}

// renderClient renders idempotent.gen.go: IdempotentClient, whose methods
// call oapi-codegen's typed client, idempotent operations under an
// idempotency key.
func renderClient(pkg string, r *ir, cs *clientSource) ([]byte, error) {
	f := NewFile(pkg)
	f.HeaderComment(Header)
	f.HeaderComment("Source: " + filepath.Base(r.SpecFile))
	f.ImportName(pkgIdemClient, "idemclient")
	for name, path := range cs.imports {
		if name == path[strings.LastIndex(path, "/")+1:] {
			f.ImportName(path, name)
		} else {
			f.ImportAlias(path, name) // e.g. openapi_types, as oapi-codegen's file has it
		}
	}

	f.Add(doc(0, "IdempotentClient calls the API through oapi-codegen's typed client. Each method of an operation with x-idempotency takes the intent's idempotency key, or mints one, and sends it on every attempt; the other operations' methods pass through. Retries follow the idemclient.Policy given to NewIdempotentClient."))
	fields := []Code{
		doc(1, "Client is the typed client underneath. Its idempotent operations called directly carry no key."),
		Id("Client").Id("ClientWithResponsesInterface"),
	}
	for _, op := range r.Served {
		if op.plain != nil && op.plain.Precondition != "" && cs.readBack(op.plain.Path) != nil {
			fields = append(fields, Line(),
				doc(1, "SameResource decides whether a conditional write's resource, read back after a 412 on a retry, holds what the write sent (both JSON bodies, with the operation's id): then an earlier attempt made it, and the call's Result is Confirmed. Nil means idemclient.SameJSON: every member sent, with the same value."),
				Id("SameResource").Func().Params(Id("operationID").String(), List(Id("sent"), Id("current")).Index().Byte()).Bool())
			break
		}
	}
	f.Type().Id("IdempotentClient").Struct(fields...)
	f.Line()
	f.Add(doc(0, "NewIdempotentClient returns a client of the API at server. Each attempt is sent by the client's doer (an *http.Client unless opts set one with WithHTTPClient, whose Timeout then bounds each attempt); policy decides which answers are retried and how long to wait. The context of each call bounds all its attempts."))
	f.Func().Id("NewIdempotentClient").Params(Id("server").String(), Id("policy").Qual(pkgIdemClient, "Policy"), Id("opts").Op("...").Id("ClientOption")).
		Params(Op("*").Id("IdempotentClient"), Error()).Block(
		List(Id("c"), Err()).Op(":=").Id("NewClient").Call(Id("server"), Id("opts").Op("...")),
		If(Err().Op("!=").Nil()).Block(Return(Nil(), Err())),
		Id("c").Dot("Client").Op("=").Qual(pkgIdemClient, "NewDoer").Call(Id("c").Dot("Client"), Id("policy")),
		Return(Op("&").Id("IdempotentClient").Values(Dict{
			Id("Client"): Op("&").Id("ClientWithResponses").Values(Dict{Id("ClientInterface"): Id("c")}),
		}), Nil()),
	)

	for _, op := range r.Served {
		methods := cs.byRoute[op.route()]
		if len(methods) == 0 {
			return nil, fmt.Errorf("gen: oapi-codegen generated no client method for %s", op.route())
		}
		var readBack *clientMethod
		if op.plain != nil && op.plain.Precondition != "" {
			readBack = cs.readBack(op.plain.Path)
		}
		for _, m := range methods {
			var err error
			switch o := op.idem; {
			case o == nil && readBack != nil:
				err = renderConditionalMethod(f, cs, op.plain, m, *readBack)
			case o == nil:
				err = renderPlainMethod(f, cs, op.plain, m)
			case o.X.Key.Pointer != "":
				err = renderBodyKeyedMethod(f, cs, o, m)
			default:
				err = renderIdempotentMethod(f, cs, o, m)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	return render(f, idemClientFile)
}

// params returns the wrapper's parameters (after ctx and before
// reqEditors) and the arguments passing them on.
func (cs *clientSource) params(m clientMethod) (params, args []Code, taken map[string]bool, err error) {
	taken = map[string]bool{"ctx": true, "reqEditors": true, "c": true}
	for _, p := range m.params {
		t, err := cs.typeCode(p.Type)
		if err != nil {
			return nil, nil, nil, err
		}
		name := p.Names[0].Name
		taken[name] = true
		params = append(params, Id(name).Add(t))
		args = append(args, Id(name))
	}
	return params, args, taken, nil
}

// fresh returns the first of names not in taken (or the first with a
// number appended), and takes it.
func fresh(taken map[string]bool, names ...string) string {
	for _, n := range names {
		if !taken[n] {
			taken[n] = true
			return n
		}
	}
	for i := 2; ; i++ {
		if n := names[0] + strconv.Itoa(i); !taken[n] {
			taken[n] = true
			return n
		}
	}
}

func renderIdempotentMethod(f *File, cs *clientSource, o *opIR, m clientMethod) error {
	params, args, taken, err := cs.params(m)
	if err != nil {
		return err
	}
	result, err := cs.typeCode(m.result)
	if err != nil {
		return err
	}
	key := fresh(taken, "key", "idempotencyKey", "idemKey")
	call := fresh(taken, "call", "idemCall")
	resp := fresh(taken, "resp", "idemResp")
	name := strings.TrimSuffix(m.name, "WithResponse")
	header := o.X.Key.Header

	lead := fmt.Sprintf("%s calls %s under the intent's idempotency key, sent in %s on every attempt.", name, o.Spec.OperationID, header)
	if o.X.Key.MaxLength >= mintedKeyLength {
		lead += ` Pass the key stored with the intent; "" mints a new one (idemclient.NewKey), which the Result returns, so store it to retry this intent after a crash or a failure.`
	} else {
		lead += fmt.Sprintf(" Pass the key stored with the intent: keys of this operation are at most %d characters, so none is minted.", o.X.Key.MaxLength)
	}
	lead += " The Result also counts the attempts and says whether the answer was a replay; its Key is set even when the error is not nil." + horizonNote(o) + readerNote(cs, m)
	f.Line()
	f.Add(o.doc(0, lead))
	all := append([]Code{Id("ctx").Qual("context", "Context"), Id(key).String()}, params...)
	all = append(all, Id("reqEditors").Op("...").Id("RequestEditorFn"))
	var body []Code
	if o.X.Key.MaxLength < mintedKeyLength {
		body = append(body, If(Id(key).Op("==").Lit("")).Block(Return(Nil(), Qual(pkgIdemClient, "Result").Values(),
			Qual("errors", "New").Call(Lit(fmt.Sprintf("%s: pass the intent's key: this operation takes keys of at most %d characters, shorter than minted ones", o.Spec.OperationID, o.X.Key.MaxLength))))))
	}
	callArgs := append([]Code{Id(call).Dot("Context").Call()}, args...)
	callArgs = append(callArgs, Append(Qual("slices", "Clip").Call(Id("reqEditors")), Id(call).Dot("SetKey")).Op("..."))
	body = append(body,
		Id(call).Op(":=").Qual(pkgIdemClient, "NewCall").Call(Id("ctx"), Lit(header), Id(key)).Dot("WithRetention").Call(durationCode(o.X.Retention)),
		List(Id(resp), Err()).Op(":=").Id("c").Dot("Client").Dot(m.name).Call(callArgs...),
		Return(Id(resp), Id(call).Dot("Result").Call(), Err()),
	)
	f.Func().Params(Id("c").Op("*").Id("IdempotentClient")).Id(name).Params(all...).
		Params(result, Qual(pkgIdemClient, "Result"), Error()).Block(body...)
	return nil
}

// readBack is the client method that reads the resource at path back
// (GET path) when its parameters are the path's (a conditional write's
// method passes its own) and, at most, an optional parameters struct; nil
// otherwise.
func (cs *clientSource) readBack(path string) *clientMethod {
	for _, m := range cs.byRoute["GET "+path] {
		ok := true
		for _, p := range m.params {
			if _, isPtr := p.Type.(*ast.StarExpr); isPtr && p.Names[0].Name == "params" {
				continue
			}
			if _, isIdent := p.Type.(*ast.Ident); !isIdent {
				ok = false
			}
		}
		if ok {
			return &m
		}
	}
	return nil
}

// renderConditionalMethod renders the method of a conditional write (a PUT
// or DELETE with a required If-None-Match or If-Match) whose resource can
// be read back: a 412 on a retry is checked against it (idemclient.Conditional).
func renderConditionalMethod(f *File, cs *clientSource, p *plainIR, m, get clientMethod) error {
	params, args, taken, err := cs.params(m)
	if err != nil {
		return err
	}
	result, err := cs.typeCode(m.result)
	if err != nil {
		return err
	}
	// The read's arguments: the write's parameter of the same name and
	// type (its path parameters), nil for an optional parameters struct.
	mine := map[string]string{}
	for _, q := range m.params {
		mine[q.Names[0].Name] = types.ExprString(q.Type)
	}
	getArgs := []Code{Id("ctx")}
	for _, q := range get.params {
		switch name := q.Names[0].Name; {
		case mine[name] == types.ExprString(q.Type):
			getArgs = append(getArgs, Id(name))
		default:
			getArgs = append(getArgs, Nil())
		}
	}
	getArgs = append(getArgs, Id("reqEditors").Op("..."))
	call := fresh(taken, "call", "condCall")
	resp := fresh(taken, "resp", "condResp")
	read := fresh(taken, "read", "readBack")
	name := strings.TrimSuffix(m.name, "WithResponse")
	getName := strings.TrimSuffix(get.name, "WithResponse")
	f.Line()
	f.Add(doc(0, append([]string{fmt.Sprintf("%s calls %s, a conditional write (%s): it sends no key, and the policy retries it; a 412 on a retry may answer an earlier attempt whose own answer was lost. %s then reads the resource back (%s, GET %s) and, when c.SameResource (nil: idemclient.SameJSON) finds that it holds the body sent, sets the Result's Confirmed: the write is done, and resp is the 412. reqEditors apply to the read too.",
		name, p.name(), p.Precondition, name, getName, nobreak(p.Path))}, opParagraphs(p.Summary, p.Method, p.Path)...)...))
	all := append([]Code{Id("ctx").Qual("context", "Context")}, params...)
	all = append(all, Id("reqEditors").Op("...").Id("RequestEditorFn"))
	callArgs := append([]Code{Id(call).Dot("Context").Call()}, args...)
	callArgs = append(callArgs, Append(Qual("slices", "Clip").Call(Id("reqEditors")), Id(call).Dot("Capture")).Op("..."))
	f.Func().Params(Id("c").Op("*").Id("IdempotentClient")).Id(name).Params(all...).
		Params(result, Qual(pkgIdemClient, "Result"), Error()).Block(
		Id(call).Op(":=").Qual(pkgIdemClient, "NewConditional").Call(Id("ctx")),
		List(Id(resp), Err()).Op(":=").Id("c").Dot("Client").Dot(m.name).Call(callArgs...),
		If(Err().Op("!=").Nil().Op("||").Id(resp).Dot("StatusCode").Call().Op("!=").Qual("net/http", "StatusPreconditionFailed")).Block(
			Return(Id(resp), Id(call).Dot("Result").Call(), Err()),
		),
		Id(read).Op(":=").Func().Params(Id("ctx").Qual("context", "Context")).Params(Int(), Index().Byte(), Error()).Block(
			List(Id("r"), Err()).Op(":=").Id("c").Dot("Client").Dot(get.name).Call(getArgs...),
			If(Err().Op("!=").Nil()).Block(Return(Lit(0), Nil(), Err())),
			Return(Id("r").Dot("StatusCode").Call(), Id("r").Dot("Body"), Nil()),
		),
		Var().Id("same").Func().Params(List(Id("sent"), Id("current")).Index().Byte()).Bool(),
		If(Id("c").Dot("SameResource").Op("!=").Nil()).Block(
			Id("same").Op("=").Func().Params(List(Id("sent"), Id("current")).Index().Byte()).Bool().Block(
				Return(Id("c").Dot("SameResource").Call(Lit(p.OperationID), Id("sent"), Id("current"))),
			),
		),
		List(Id("_"), Err()).Op("=").Id(call).Dot("Confirm").Call(Id("ctx"), Id(read), Id("same")),
		Return(Id(resp), Id(call).Dot("Result").Call(), Err()),
	)
	return nil
}

// readerNote says, for a method taking the body as an io.Reader, which
// readers a retry can resend ("" for other methods).
func readerNote(cs *clientSource, m clientMethod) string {
	var note string
	for _, p := range m.params {
		if sel, ok := p.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "Reader" && cs.imports[fmt.Sprint(sel.X)] == "io" {
			note += fmt.Sprintf(" A retry resends %s only if it is a *bytes.Buffer, *bytes.Reader or *strings.Reader; any other reader makes the first answer final.", p.Names[0].Name)
		}
	}
	return note
}

// renderBodyKeyedMethod renders the method of an operation whose key is a
// member of its body (key.pointer): the key travels in the body, so the
// method takes none; it tracks the call and has its requests retried as
// keyed ones.
func renderBodyKeyedMethod(f *File, cs *clientSource, o *opIR, m clientMethod) error {
	params, args, taken, err := cs.params(m)
	if err != nil {
		return err
	}
	result, err := cs.typeCode(m.result)
	if err != nil {
		return err
	}
	call := fresh(taken, "call", "idemCall")
	resp := fresh(taken, "resp", "idemResp")
	name := strings.TrimSuffix(m.name, "WithResponse")

	f.Line()
	f.Add(o.doc(0, fmt.Sprintf("%s calls %s, whose idempotency key is the body's %s: every attempt sends the same body, so the policy retries it as a keyed request. Send the same body (the same key) again to retry the intent later. The Result counts the attempts, says whether the answer was a replay, and has the key read from the body.%s%s",
		name, o.Spec.OperationID, o.X.Key.Pointer, horizonNote(o), readerNote(cs, m))))
	all := append([]Code{Id("ctx").Qual("context", "Context")}, params...)
	all = append(all, Id("reqEditors").Op("...").Id("RequestEditorFn"))
	callArgs := append([]Code{Id(call).Dot("Context").Call()}, args...)
	callArgs = append(callArgs, Append(Qual("slices", "Clip").Call(Id("reqEditors")), Id(call).Dot("SetKey")).Op("..."))
	f.Func().Params(Id("c").Op("*").Id("IdempotentClient")).Id(name).Params(all...).
		Params(result, Qual(pkgIdemClient, "Result"), Error()).Block(
		Id(call).Op(":=").Qual(pkgIdemClient, "NewBodyCall").Call(Id("ctx"), Lit(o.X.Key.Pointer)).Dot("WithRetention").Call(durationCode(o.X.Retention)),
		List(Id(resp), Err()).Op(":=").Id("c").Dot("Client").Dot(m.name).Call(callArgs...),
		Return(Id(resp), Id(call).Dot("Result").Call(), Err()),
	)
	return nil
}

func renderPlainMethod(f *File, cs *clientSource, p *plainIR, m clientMethod) error {
	params, args, _, err := cs.params(m)
	if err != nil {
		return err
	}
	result, err := cs.typeCode(m.result)
	if err != nil {
		return err
	}
	name := strings.TrimSuffix(m.name, "WithResponse")
	f.Line()
	f.Add(doc(0, append([]string{fmt.Sprintf("%s calls %s, which has no x-idempotency: it sends no key, and the policy retries it only if its method is idempotent (GET, HEAD, OPTIONS, PUT, DELETE) or nothing reached the server.", name, p.name())},
		opParagraphs(p.Summary, p.Method, p.Path)...)...))
	all := append([]Code{Id("ctx").Qual("context", "Context")}, params...)
	all = append(all, Id("reqEditors").Op("...").Id("RequestEditorFn"))
	callArgs := append([]Code{Id("ctx")}, args...)
	callArgs = append(callArgs, Id("reqEditors").Op("..."))
	f.Func().Params(Id("c").Op("*").Id("IdempotentClient")).Id(name).Params(all...).Params(result, Error()).
		Block(Return(Id("c").Dot("Client").Dot(m.name).Call(callArgs...)))
	return nil
}

// horizonNote says, in an idempotent method's doc, that a call is held to
// the operation's retention.
func horizonNote(o *opIR) string {
	return fmt.Sprintf(" An intent older than the operation's retention (%s) less the policy's margin is not sent: the call fails with idemclient.ErrIntentExpired, since the server may have forgotten its key; an intent begins with its call, at the time a UUIDv7 key holds, or at idemclient.WithIntentStart's.", humanDuration(o.X.Retention.String()))
}

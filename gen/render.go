package gen

import (
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	. "github.com/dave/jennifer/jen"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"

	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtype"
	"github.com/idemgen/idemgen/spec"
)

const (
	pkgIdem       = "github.com/idemgen/idemgen/runtime/idem"
	pkgIdemEcho   = "github.com/idemgen/idemgen/runtime/idemecho"
	pkgIdemStd    = "github.com/idemgen/idemgen/runtime/idemstd"
	pkgIdemGin    = "github.com/idemgen/idemgen/runtime/idemgin"
	pkgIdemHTTP   = "github.com/idemgen/idemgen/runtime/idemhttp"
	pkgIdemType   = "github.com/idemgen/idemgen/runtime/idemtype"
	pkgIdemAPI    = "github.com/idemgen/idemgen/runtime/idemapi"
	pkgIdemPreset = "github.com/idemgen/idemgen/runtime/idempreset"
	pkgPgx        = "github.com/jackc/pgx/v5"
	pkgEcho       = "github.com/labstack/echo/v4"
	pkgChi        = "github.com/go-chi/chi/v5"
	pkgGorilla    = "github.com/gorilla/mux"
	pkgGin        = "github.com/gin-gonic/gin"
)

// importNames are the package names of what generated code imports.
// jennifer guesses a name from the last path element (v4, v5): every
// import is named from here.
var importNames = map[string]string{
	"context": "context",
	pkgIdem:   "idem", pkgIdemEcho: "idemecho", pkgIdemStd: "idemstd", pkgIdemGin: "idemgin", pkgIdemHTTP: "idemhttp", pkgIdemType: "idemtype",
	pkgPgx: "pgx", pkgEcho: "echo", pkgChi: "chi", pkgGorilla: "mux", pkgGin: "gin",
}

// renderGlue renders idempotency.gen.go.
func renderGlue(r *ir) ([]byte, error) {
	f := NewFile(r.Package)
	f.HeaderComment(Header)
	f.HeaderComment("Source: " + filepath.Base(r.SpecFile))
	f.ImportNames(importNames)

	for _, o := range r.Idempotent {
		if !o.X.Handler {
			renderPhasesIface(f, o)
		}
	}
	renderPhasesStruct(f, r)
	renderPlainIface(f, r)
	renderSpecs(f, r)
	renderRefusalStatuses(f, r)
	renderContract(f, r)
	renderServer(f, r)
	switch r.Server {
	case serverEcho:
		renderRegister(f, r)
	case serverGin:
		renderRegisterGin(f, r)
	default:
		renderRegisterHTTP(f, r)
	}

	return render(f, GlueFile)
}

func route(o *opIR) string { return o.Spec.Method + " " + o.Spec.Path }

// adapter is the runtime package the glue of r's server builds on:
// idemecho for echo, idemgin for gin, idemstd for the routers of
// http.Handlers.
func (r *ir) adapter() string {
	switch r.Server {
	case serverEcho:
		return pkgIdemEcho
	case serverGin:
		return pkgIdemGin
	}
	return pkgIdemStd
}

// execute writes the adapter's Execute call: idemecho's and idemgin's take
// the runtime, idemstd's the engine.
func (r *ir) execute(payload, phases Code) Code {
	return Qual(r.adapter(), "Execute").Call(Id("ctx"), r.runtime(), payload, phases)
}

// executeHandler writes the adapter's ExecuteHandler call.
func (r *ir) executeHandler(h Code) Code {
	return Qual(r.adapter(), "ExecuteHandler").Call(Id("ctx"), r.runtime(), h)
}

func (r *ir) runtime() *Statement {
	rt := Id("s").Dot("rt")
	if r.adapter() == pkgIdemStd {
		rt = rt.Dot("Engine")
	}
	return rt
}

// doc writes the operation's doc: lead, then the operation's summary and
// route.
func (o *opIR) doc(depth int, lead string) Code {
	return doc(depth, append([]string{lead}, opParagraphs(o.Spec.Op.Summary, o.Spec.Method, o.Spec.Path)...)...)
}

// strictSignature writes a method of oapi-codegen's strict server interface.
func strictSignature(name, request, response string) *Statement {
	return Id(name).Params(Id("ctx").Qual("context", "Context"), Id("request").Id(request)).Params(Id(response), Error())
}

func renderPhasesIface(f *File, o *opIR) {
	f.Add(o.doc(0, fmt.Sprintf("%s are the phases of %s, in order. An execution that dies between phases resumes after the last committed local phase, with the state it saved.", o.PhasesIface(), o.Spec.OperationID)))
	var methods []Code
	for i, p := range o.Phases {
		sig := o.method(p)
		methods = append(methods, doc(1, phaseDoc(o, i, p)), Id(p.GoName).Params(sig.paramsCode()...).Add(sig.resultsCode()))
	}
	if o.renders() {
		sig := o.renderMethod()
		methods = append(methods, doc(1, renderDoc), Id("Render").Params(sig.paramsCode()...).Add(sig.resultsCode()))
	}
	f.Type().Id(o.PhasesIface()).Interface(methods...)
	f.Line()
}

func renderPhasesStruct(f *File, r *ir) {
	f.Add(doc(0, "Phases holds the phase implementations of every idempotent operation."))
	var fields []Code
	for _, o := range r.Idempotent {
		if !o.X.Handler {
			fields = append(fields, Id(o.GoName).Id(o.PhasesIface()).Comment(route(o)))
		}
	}
	f.Type().Id("Phases").Struct(fields...)
	f.Line()
}

func renderPlainIface(f *File, r *ir) {
	lead := "PlainHandlers serves the operations without x-idempotency, as oapi-codegen's strict server interface does."
	var handlers []*opIR
	for _, o := range r.Idempotent {
		if o.X.Handler {
			handlers = append(handlers, o)
		}
	}
	if len(handlers) > 0 {
		lead = "PlainHandlers serves the operations without x-idempotency, as oapi-codegen's strict server interface does, and those that keep their handler (x-idempotency handler: true), which the engine runs."
	}
	f.Add(doc(0, lead))
	var methods []Code
	for _, p := range r.Plain {
		methods = append(methods, doc(1, append([]string{p.GoName + " serves " + p.name() + "."}, opParagraphs(p.Summary, p.Method, p.Path)...)...),
			strictSignature(p.GoName, p.RequestType, p.ResponseType))
	}
	for _, o := range handlers {
		methods = append(methods, o.doc(1, fmt.Sprintf("%s serves %s idempotently: the engine runs it for a new key (idem.RunHandler), its database work in the execution's transactions (idem.Tx, idem.Begin), its calls to other systems in steps (idem.Local, idem.Foreign); a retry gets the stored answer.", o.GoName, o.Spec.OperationID)),
			strictSignature(o.GoName, o.RequestType, o.ResponseType))
	}
	f.Type().Id("PlainHandlers").Interface(methods...)
	f.Line()
}

// durationCode writes d in the largest whole unit, e.g. 24 * time.Hour.
func durationCode(d time.Duration) Code {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "Hour"}, {time.Minute, "Minute"}, {time.Second, "Second"}, {time.Millisecond, "Millisecond"}} {
		if d%u.d == 0 {
			return Lit(int(d/u.d)).Op("*").Qual("time", u.name)
		}
	}
	return Qual("time", "Duration").Call(Lit(int64(d)))
}

// waitCode writes a policy's wait: idem.NoWait for none.
func waitCode(d time.Duration) Code {
	if d == 0 {
		return Qual(pkgIdem, "NoWait")
	}
	return durationCode(d)
}

// strs writes a list of strings; nil, the zero value, for none.
func strs(l []string) Code {
	if l == nil {
		return nil
	}
	vals := make([]Code, len(l))
	for i, s := range l {
		vals[i] = Lit(s)
	}
	return Index().String().Values(vals...)
}

// lit writes v; nil, the zero value, for "", 0 and false.
func lit(v any) Code {
	if reflect.ValueOf(v).IsZero() {
		return nil
	}
	return Lit(v)
}

// kv is one element of a composite literal.
type kv struct{ key, value Code }

// field is the element of a struct literal naming field name.
func field(name string, value Code) kv { return kv{Id(name), value} }

// elements writes the body of a composite literal, one element a line, in
// the order given: a struct's fields as the type declares them, a map's
// entries as the spec lists their operations. Elements whose value is nil
// hold the zero value and are left out.
func elements(elems ...kv) *Statement {
	var items []Code
	for _, e := range elems {
		if e.value != nil {
			items = append(items, Add(e.key).Op(":").Add(e.value))
		}
	}
	return Custom(oneALine("{", "}"), items...)
}

// oneALine lays a list out one item a line between open and close: long
// lists (every operation of a spec) stay readable.
func oneALine(open, close string) Options {
	return Options{Open: open, Close: close, Separator: ",", Multi: true}
}

// renderSpecs writes each idempotent operation's x-idempotency as the runtime
// takes it: the engine's operation and policy, and the protocol's key rule,
// scope and fingerprint.
func renderSpecs(f *File, r *ir) {
	for _, o := range r.Idempotent {
		x := o.X
		f.Add(doc(0, fmt.Sprintf("%s is the x-idempotency of %s (%s), as the runtime takes it.", o.idempotencyVar(), o.Spec.OperationID, nobreak(route(o)))))
		f.Var().Id(o.idempotencyVar()).Op("=").Op("&").Qual(r.adapter(), "Spec").Add(elements(
			field("Operation", Op("&").Qual(pkgIdem, "Operation").Add(elements(
				field("ID", Lit(o.Spec.OperationID)),
				field("Namespace", lit(x.Group)),
				field("Policy", Qual(pkgIdem, "Policy").Add(elements(
					field("Retention", durationCode(x.Retention)),
					field("Lease", durationCode(x.Lease)),
					field("Ambiguous", vocab(x.Ambiguous)),
					field("Complete", vocab(x.Complete)),
					field("ReplayHeaders", strs(x.Replay.Headers)),
					field("MaxReplayBody", lit(x.Replay.MaxBodyBytes)),
					field("Render", strs(x.Replay.Render)),
					field("Wait", waitCode(x.Wait)),
				))),
			))),
			field("Key", Qual(pkgIdemHTTP, "KeyRule").Add(keyRule(x))),
			field("Scope", scopeCode(x.Scope)),
			field("Placement", placementCode(x.Placement)),
			field("NaturalKey", naturalKeyCode(x.NaturalKey)),
			field("Route", Lit(o.Spec.Path)),
			field("Exclude", strs(x.Fingerprint.Exclude)),
			field("Headers", strs(x.Fingerprint.Headers)),
			field("MaxBodyBytes", lit(x.Request.MaxBodyBytes)),
			field("MediaTypes", strs(mediaTypes(o.Spec))),
			// echo's strict handler returns a binder's error as it is; the
			// glue's bound middleware tells it from the service's.
			field("BindsStrict", lit(r.adapter() == pkgIdemEcho)),
		))
		f.Line()
	}
}

// mediaTypes are the media types of the operation's request body, in
// order; nil when it declares none.
func mediaTypes(op *spec.Operation) []string {
	rb := op.Op.RequestBody
	if rb == nil || rb.Value == nil || len(rb.Value.Content) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(rb.Value.Content))
}

// renderRefusalStatuses declares RefusalStatuses, the config's
// refusal-statuses, when it has any: what a service passes to
// idemapi.JSONRefusals so that it answers the statuses its enriched spec
// documents.
func renderRefusalStatuses(f *File, r *ir) {
	if len(r.RefusalStatuses) == 0 {
		return
	}
	var entries []Code
	for _, k := range slices.Sorted(maps.Keys(r.RefusalStatuses)) {
		entries = append(entries, Qual(pkgIdemType, "ErrorKind").Call(Lit(k)).Op(":").Lit(r.RefusalStatuses[k]))
	}
	f.Add(doc(0, "RefusalStatuses are the statuses the config's refusal-statuses give refusal kinds, as the enriched spec documents them: pass them to idemapi.JSONRefusals (idemapi.Contract.Refusals) so that the service answers so."))
	f.Var().Id("RefusalStatuses").Op("=").Map(Qual(pkgIdemType, "ErrorKind")).Int().Custom(oneALine("{", "}"), entries...)
	f.Line()
}

// renderContract declares Contract, the engine options of the config's
// preset, when it has one.
func renderContract(f *File, r *ir) {
	if r.Preset != PresetStripe {
		return
	}
	f.Add(doc(0, "Contract is the API's contract with its clients that the config's preset (stripe) names: refusals in Stripe's error object with Stripe's statuses, and Stripe's headers (Request-Id, the key echoed, Original-Request, Stripe-Should-Retry), with the statuses of RefusalStatuses. Give it to the engine: idem.New(pool, idem.Options{Contract: Contract(), ...})."))
	statuses := Code(Nil())
	if len(r.RefusalStatuses) > 0 {
		statuses = Id("RefusalStatuses")
	}
	f.Func().Id("Contract").Params().Qual(pkgIdemAPI, "Contract").Block(
		Return(Qual(pkgIdemPreset, "StripeWith").Call(statuses)),
	)
	f.Line()
}

// keyRule writes the operation's idemhttp.KeyRule: a header, or a pointer
// into the body.
func keyRule(x *spec.Extension) Code {
	fields := []kv{
		field("Header", lit(x.Key.Header)),
		field("Pointer", lit(x.Key.Pointer)),
		field("Required", lit(x.Key.Required)),
		field("MaxLength", lit(x.Key.MaxLength)),
	}
	if x.Key.MinLength > 0 {
		fields = append(fields, field("MinLength", lit(x.Key.MinLength)))
	}
	return elements(append(fields, field("Format", vocab(x.Key.Format)))...)
}

// placementCode writes the operation's placement, or nothing for none:
// idemtype.Placement{Kind: idemtype.PlacementPath, Name: "account"}.
func placementCode(pl idemtype.Placement) Code {
	if pl.IsZero() {
		return nil
	}
	return Qual(pkgIdemType, "Placement").Values(placementFields(pl)...)
}

// placementFields are a placement's fields: Kind and, but for principal,
// Name.
func placementFields(pl idemtype.Placement) []Code {
	fields := []Code{Id("Kind").Op(":").Qual(pkgIdemType, placementKinds[pl.Kind])}
	if pl.Name != "" {
		fields = append(fields, Id("Name").Op(":").Lit(pl.Name))
	}
	return fields
}

// naturalKeyCode writes the operation's natural key, or nothing for none:
// []idemtype.Placement{{Kind: idemtype.PlacementBody, Name: "/order_ref"}}.
func naturalKeyCode(parts []idemtype.Placement) Code {
	if len(parts) == 0 {
		return nil
	}
	vals := make([]Code, len(parts))
	for i, p := range parts {
		vals[i] = Values(placementFields(p)...)
	}
	return Index().Qual(pkgIdemType, "Placement").Values(vals...)
}

// placementKinds names each placement kind's constant.
var placementKinds = map[idemtype.PlacementKind]string{
	idemtype.PlacementPrincipal: "PlacementPrincipal", idemtype.PlacementHeader: "PlacementHeader",
	idemtype.PlacementPath: "PlacementPath", idemtype.PlacementBody: "PlacementBody",
}

// scopeCode writes the operation's parsed scope on one line, e.g.
// idemtype.Scope{Kind: idemtype.ScopeHeader, Name: "X-Tenant"}: the runtime
// takes it as it is, parsing nothing per request.
func scopeCode(sc spec.Scope) Code {
	fields := []Code{Id("Kind").Op(":").Add(vocab(sc.Kind))}
	if sc.Name != "" {
		fields = append(fields, Id("Name").Op(":").Lit(sc.Name))
	}
	if sc.Principal {
		fields = append(fields, Id("Principal").Op(":").True())
	}
	return Qual(pkgIdemType, "Scope").Values(fields...)
}

// vocabNames names the idemtype constant of each value of the vocabulary
// that generated code spells out. Its keys are typed, so a value of one
// type never finds the constant of another.
var vocabNames = map[any]string{
	idemtype.ScopePrincipal: "ScopePrincipal", idemtype.ScopeGlobal: "ScopeGlobal",
	idemtype.ScopeHeader: "ScopeHeader", idemtype.ScopeSender: "ScopeSender", idemtype.ScopePath: "ScopePath",
	idemtype.KeyFormatAny: "KeyFormatAny", idemtype.KeyFormatUUID: "KeyFormatUUID", idemtype.KeyFormatRaw: "KeyFormatRaw",
	idemtype.AmbiguousResume: "AmbiguousResume", idemtype.AmbiguousStore: "AmbiguousStore",
	idemtype.CompleteOnRetry: "CompleteOnRetry", idemtype.CompleteBackground: "CompleteBackground",
}

// vocab writes the idemtype constant whose value is v. spec.Parse lets
// through only the values that have one.
func vocab(v any) Code {
	name, ok := vocabNames[v]
	if !ok {
		panic(fmt.Sprintf("gen: no idemtype constant for %T %v", v, v))
	}
	return Qual(pkgIdemType, name)
}

func renderServer(f *File, r *ir) {
	f.Add(doc(0, "idemServer is the strict server: idempotent operations run their phases through the engine, the others go to PlainHandlers."))
	f.Type().Id("idemServer").Struct(
		Id("plain").Id("PlainHandlers"),
		Id("phases").Id("Phases"),
		Id("rt").Op("*").Qual(r.adapter(), "Runtime"),
	)
	f.Line()
	f.Var().Id("_").Id("StrictServerInterface").Op("=").Parens(Op("*").Id("idemServer")).Parens(Nil())
	f.Line()
	for _, op := range r.Served {
		if p := op.plain; p != nil {
			f.Add(doc(0, fmt.Sprintf("%s serves %s with PlainHandlers.", p.GoName, nobreak(op.route()))))
			f.Func().Params(Id("s").Op("*").Id("idemServer")).Add(strictSignature(p.GoName, p.RequestType, p.ResponseType)).
				Block(Return(Id("s").Dot("plain").Dot(p.GoName).Call(Id("ctx"), Id("request"))))
			f.Line()
			continue
		}
		o := op.idem
		background := o.X.Complete == idemtype.CompleteBackground
		body := []Code{}
		payload := Nil()
		if background {
			body = append(body,
				List(Id("payload"), Err()).Op(":=").Qual("encoding/json", "Marshal").Call(Id("request")),
				If(Err().Op("!=").Nil()).Block(Return(Nil(), Err())),
			)
			payload = Id("payload")
		}
		run := r.execute(payload, Id(o.bindFunc()).Call(Id("s").Dot("phases").Dot(o.GoName), Id("request")))
		what := "the phases of " + o.Spec.OperationID
		if o.X.Handler {
			run = r.executeHandler(Id(o.handlerFunc()).Call(Id("s").Dot("plain"), Id("request")))
			what = "PlainHandlers' " + o.GoName
		}
		body = append(body,
			List(Id("resp"), Err()).Op(":=").Add(run),
			If(Err().Op("!=").Nil()).Block(Return(Nil(), Err())),
			Return(Id(o.outcomeType()).Call(Qual(r.adapter(), "Writer").Call(Id("ctx"), Id("resp"))), Nil()),
		)
		f.Add(doc(0, fmt.Sprintf("%s serves %s with the engine: it runs %s for a new key, or answers with the outcome a retry's key already has.", o.GoName, nobreak(route(o)), what)))
		f.Func().Params(Id("s").Op("*").Id("idemServer")).Add(strictSignature(o.GoName, o.RequestType, o.ResponseType)).
			Block(body...)
		f.Line()
		f.Add(doc(0, fmt.Sprintf("%s writes the engine's outcome of a request (the phases' response, its replay, or a problem) as a %s.", o.outcomeType(), o.ResponseType)))
		f.Type().Id(o.outcomeType()).Func().Params(Qual("net/http", "ResponseWriter")).Error()
		f.Line()
		f.Func().Params(Id("o").Id(o.outcomeType())).Id(o.VisitMethod).Params(Id("w").Qual("net/http", "ResponseWriter")).Error().
			Block(Return(Id("o").Call(Id("w"))))
		f.Line()
		if o.X.Handler {
			renderHandlerBind(f, r, o)
		} else {
			renderPhaseList(f, r, o)
			renderAnswer(f, r, o)
		}
		renderOperationFunc(f, o)
	}
}

// renderAnswer writes XAnswer, with which a phase before the last answers
// with the operation's own typed response.
func renderAnswer(f *File, r *ir, o *opIR) {
	f.Add(doc(0, fmt.Sprintf("%s is what a phase of %s before the last returns to end the execution with response (a 404 for what is not there, a 409) instead of going on: it is stored and replayed to every retry, as the final phase's response would be, and a local phase's writes commit with it (idem.Answer).", o.answerFunc(), o.Spec.OperationID)))
	f.Func().Id(o.answerFunc()).Params(Id("response").Id(o.ResponseType)).Error().Block(
		If(Id("response").Op("==").Nil()).Block(Return(Qual("errors", "New").Call(
			Lit(fmt.Sprintf("%s: %s needs a response", o.Spec.OperationID, o.answerFunc()))))),
		List(Id("resp"), Err()).Op(":=").Qual(r.adapter(), "Render").Call(Id("response").Dot(o.VisitMethod)),
		If(Err().Op("!=").Nil()).Block(Return(Err())),
		Return(Qual(pkgIdem, "Answer").Call(Id("resp"))),
	)
	f.Line()
}

// renderHandlerBind writes XHandler, which binds the strict handler of an
// operation that keeps it to one request.
func renderHandlerBind(f *File, r *ir, o *opIR) {
	f.Add(doc(0, fmt.Sprintf("%s binds the strict handler of %s (PlainHandlers' %s, or anything with that method) to one request, as the glue runs it: the engine's idem.RunHandler takes it, and so does idemtest.Check (Case.Handler), which runs it through crashes, takeovers and concurrent duplicates.", o.handlerFunc(), o.Spec.OperationID, o.GoName)))
	f.Func().Id(o.handlerFunc()).Params(
		Id("h").Interface(strictSignature(o.GoName, o.RequestType, o.ResponseType)),
		Id("request").Id(o.RequestType),
	).Qual(pkgIdem, "Handler").Block(
		Return(Func().Params(Id("ctx").Qual("context", "Context")).Params(Op("*").Qual(pkgIdem, "Response"), Error()).Block(
			List(Id("response"), Err()).Op(":=").Id("h").Dot(o.GoName).Call(Id("ctx"), Id("request")),
			If(Err().Op("!=").Nil()).Block(Return(Nil(), Err())),
			If(Id("response").Op("==").Nil()).Block(Return(Nil(), Qual("errors", "New").Call(
				Lit(fmt.Sprintf("%s: the handler returned no response", o.Spec.OperationID))))),
			Return(Qual(r.adapter(), "Render").Call(Id("response").Dot(o.VisitMethod))),
		)),
	)
	f.Line()
}

func renderPhaseList(f *File, r *ir, o *opIR) {
	phaseT := Qual(pkgIdem, "Phase").Types(Id(o.StateType()))
	var elems []Code
	for _, p := range o.Phases {
		call := Id("p").Dot(p.GoName).Call(o.method(p).args()...)
		body := Return(call)
		if p.Final {
			body = Block(
				List(Id("response"), Err()).Op(":=").Add(call),
				If(Err().Op("!=").Nil()).Block(Return(Nil(), Err())),
				If(Id("response").Op("==").Nil()).Block(Return(Nil(), Qual("errors", "New").Call(
					Lit(fmt.Sprintf("%s: phase %s returned no response", o.Spec.OperationID, p.Name))))),
				Return(Qual(r.adapter(), "Render").Call(Id("response").Dot(o.VisitMethod))),
			)
		} else {
			body = Block(body)
		}
		sig := o.bound(p)
		fields := []kv{
			field("Name", Lit(p.Name)),
			field(p.kind().field, Func().Params(sig.paramsCode()...).Add(sig.resultsCode()).Add(body)),
		}
		if p.Final && o.renders() {
			fields = append(fields, field("Render", Func().Params(
				Id("ctx").Qual("context", "Context"), Id("tx").Qual(pkgPgx, "Tx"), Id("ref").Qual(pkgIdem, "Reference"),
			).Params(Op("*").Qual(pkgIdem, "Response"), Error()).Block(
				List(Id("response"), Err()).Op(":=").Id("p").Dot("Render").Call(Id("ctx"), Id("tx"), Id("ref")),
				If(Err().Op("!=").Nil()).Block(Return(Nil(), Err())),
				If(Id("response").Op("==").Nil()).Block(Return(Nil(), Qual("errors", "New").Call(
					Lit(fmt.Sprintf("%s: Render returned no response", o.Spec.OperationID))))),
				Return(Qual(r.adapter(), "Render").Call(Id("response").Dot(o.VisitMethod))),
			)))
		} else if p.Final {
			// replay.render off: the records stored while it was on still
			// render, with the Render method the implementation keeps.
			fields = append(fields, field("Render", Qual(pkgIdem, "KeptRender").Call(Id("p"),
				Func().Params(Id("response").Id(o.ResponseType)).Params(Op("*").Qual(pkgIdem, "Response"), Error()).Block(
					Return(Qual(r.adapter(), "Render").Call(Id("response").Dot(o.VisitMethod))),
				))))
		}
		elems = append(elems, elements(fields...))
	}
	f.Add(doc(0, fmt.Sprintf("%s binds the phases of %s to one request, as the glue runs them: the engine's idem.Run takes them, and so does idemtest.Check, which runs them through crashes, takeovers and concurrent duplicates.", o.bindFunc(), o.Spec.OperationID)))
	f.Func().Id(o.bindFunc()).Params(Id("p").Id(o.PhasesIface()), Id("request").Id(o.RequestType)).Index().Add(phaseT).
		Block(Return(Index().Add(phaseT).ValuesFunc(func(g *Group) {
			for _, e := range elems {
				g.Line().Add(e)
			}
			g.Line()
		})))
	f.Line()
}

// renderOperationFunc writes XOperation.
func renderOperationFunc(f *File, o *opIR) {
	f.Add(doc(0, fmt.Sprintf("%s returns a copy of the operation and policy that the engine runs %s with, as its x-idempotency declares them.", o.operationFunc(), o.Spec.OperationID)))
	f.Func().Id(o.operationFunc()).Params().Op("*").Qual(pkgIdem, "Operation").Block(
		Id("op").Op(":=").Op("*").Id(o.idempotencyVar()).Dot("Operation"),
		Id("op").Dot("Policy").Dot("ReplayHeaders").Op("=").Qual("slices", "Clone").Call(Id("op").Dot("Policy").Dot("ReplayHeaders")),
		Return(Op("&").Id("op")),
	)
	f.Line()
}

func renderRegister(f *File, r *ir) {
	f.Add(doc(0, "RegisterOptions are the options of oapi-codegen's registration that RegisterWithOptions passes on: those of RegisterHandlersWithOptions and NewStrictHandler."))
	f.Type().Id("RegisterOptions").Struct(
		doc(1, "BaseURL is prepended to every route, as by RegisterHandlersWithBaseURL. To serve the API in an echo group, pass the group as the router."),
		Id("BaseURL").String(),
		doc(1, "StrictMiddlewares wrap every strict handler, as NewStrictHandler's middlewares do: they see the typed request and response, of idempotent operations too (there, their response is what the engine stores and replays)."),
		Id("StrictMiddlewares").Index().Id("StrictMiddlewareFunc"),
		doc(1, "OperationMiddlewares are echo middlewares by operationId, as in oapi-codegen's RegisterHandlersOptions. They run before the idempotency middleware of an idempotent operation (authenticate there: a key is claimed only after them)."),
		Id("OperationMiddlewares").Map(String()).Index().Qual(pkgEcho, "MiddlewareFunc"),
		doc(1, "ErrorHandler, when set, gets every error of a strict handler (a body that does not bind, an error of a plain handler or of a phase) before anything above it does; what it returns goes on up echo's chain, nil when it wrote the response itself."),
		Id("ErrorHandler").Func().Params(Id("c").Qual(pkgEcho, "Context"), Id("err").Error()).Error(),
	)
	f.Line()

	paragraphs := []string{"Register serves every operation of the spec on router (an *echo.Echo or *echo.Group). Idempotent operations get the Idempotency-Key protocol and run their phases from phases through rt's engine; the others are served by plain (nil when every operation is idempotent). Operations completed in the background are registered with the engine's completer."}
	for _, o := range r.Idempotent {
		if o.X.Scope.Kind == idemtype.ScopeSender {
			paragraphs = append(paragraphs, "Operations scoped to a signed sender verify it with rt.Senders before anything else; keep them out of middleware that authenticates callers otherwise.")
			break
		}
	}
	f.Add(doc(0, paragraphs...))
	f.Func().Id("Register").Params(Id("router").Id("EchoRouter"), Id("plain").Id("PlainHandlers"), Id("phases").Id("Phases"),
		Id("rt").Op("*").Qual(pkgIdemEcho, "Runtime")).Error().Block(
		Return(Id("RegisterWithOptions").Call(Id("router"), Id("plain"), Id("phases"), Id("rt"), Id("RegisterOptions").Values())))
	f.Line()

	f.Add(doc(0, "RegisterWithOptions is Register with the options of oapi-codegen's registration."))
	body := registerSetup(r)
	var idempotency []kv
	for _, o := range r.Idempotent {
		idempotency = append(idempotency, kv{Lit(o.Spec.OperationID), Qual(pkgIdemEcho, "Middleware").Call(Id("rt"), Id(o.idempotencyVar()))})
	}
	var operations []Code
	for _, k := range r.MiddlewareKeys {
		operations = append(operations, Lit(k))
	}
	body = append(body,
		Id("server").Op(":=").Op("&").Id("idemServer").Add(elements(field("plain", Id("plain")), field("phases", Id("phases")), field("rt", Id("rt")))),
		Id("idempotency").Op(":=").Map(String()).Qual(pkgEcho, "MiddlewareFunc").Add(elements(idempotency...)),
		Id("operations").Op(":=").Index().String().Custom(oneALine("{", "}"), operations...),
		Id("middlewares").Op(":=").Qual(pkgIdemEcho, "OperationMiddlewares").Call(
			Id("options").Dot("OperationMiddlewares"), Id("idempotency"), Id("options").Dot("ErrorHandler"), Id("operations")),
		// bound, outermost, runs once the request bound: an error before it
		// is the binder's, which the idempotency middleware answers 400.
		Id("RegisterHandlersWithOptions").Call(Id("router"),
			Id("NewStrictHandler").Call(Id("server"), Append(Qual("slices", "Clip").Call(Id("options").Dot("StrictMiddlewares")), Id("bound"))),
			Id("RegisterHandlersOptions").Add(elements(
				field("BaseURL", Id("options").Dot("BaseURL")),
				field("OperationMiddlewares", Id("middlewares")),
			))),
		Return(Nil()),
	)
	f.Func().Id("RegisterWithOptions").Params(Id("router").Id("EchoRouter"), Id("plain").Id("PlainHandlers"), Id("phases").Id("Phases"),
		Id("rt").Op("*").Qual(pkgIdemEcho, "Runtime"), Id("options").Id("RegisterOptions")).Error().Block(body...)
	f.Line()
	f.Add(doc(0, "bound is the outermost strict middleware: it tells the idempotency middleware that the request bound, so that an error returned before it (a form field that does not parse) is the binder's, answered 400, and not the service's."))
	f.Func().Id("bound").Params(Id("f").Id("StrictHandlerFunc"), Id("operationID").String()).Id("StrictHandlerFunc").Block(
		Return(Func().Params(Id("ctx").Qual(pkgEcho, "Context"), Id("request").Any()).Params(Any(), Error()).Block(
			Qual(pkgIdemEcho, "Bound").Call(Id("ctx").Dot("Request").Call().Dot("Context").Call()),
			Return(Id("f").Call(Id("ctx"), Id("request"))),
		)),
	)
}

// registerSetup writes what every RegisterWithOptions does before it
// registers routes: check rt, plain and phases and the resolvers the
// operations' scopes need, register the operations with the engine, and
// the background completer of operations completed in the background.
// failed is what the function returns besides an error.
func registerSetup(r *ir, failed ...Code) []Code {
	refuse := func(cond *Statement, msg string) Code {
		return If(cond).Block(Return(append(append([]Code{}, failed...), Qual("errors", "New").Call(Lit(msg)))...))
	}
	body := []Code{refuse(Id("rt").Op("==").Nil().Op("||").Id("rt").Dot("Engine").Op("==").Nil(), "Register: rt and rt.Engine are required")}
	handlers := slices.ContainsFunc(r.Idempotent, func(o *opIR) bool { return o.X.Handler })
	switch {
	case len(r.Plain) > 0:
		body = append(body, refuse(Id("plain").Op("==").Nil(), "Register: plain is nil, but the spec has operations without x-idempotency"))
	case handlers:
		body = append(body, refuse(Id("plain").Op("==").Nil(), "Register: plain is nil, but the spec has operations that keep their handler (x-idempotency handler: true)"))
	}
	var principal []string
	var senders []string
	bySender := map[string][]string{}
	for _, o := range r.Idempotent {
		if !o.X.Handler {
			body = append(body, refuse(Id("phases").Dot(o.GoName).Op("==").Nil(), fmt.Sprintf("Register: phases.%s is nil", o.GoName)))
		}
		switch sc := o.X.Scope; {
		case sc.NeedsPrincipal():
			principal = append(principal, o.Spec.OperationID)
		case sc.Kind == idemtype.ScopeSender:
			if bySender[sc.Name] == nil {
				senders = append(senders, sc.Name)
			}
			bySender[sc.Name] = append(bySender[sc.Name], o.Spec.OperationID)
		}
	}
	if len(principal) > 0 {
		body = append(body, refuse(Id("rt").Dot("Principal").Op("==").Nil(),
			fmt.Sprintf("Register: %s scoped to the principal; set rt.Principal", isAre(principal))))
	}
	for _, name := range senders {
		body = append(body, refuse(Id("rt").Dot("Senders").Index(Lit(name)).Op("==").Nil(),
			fmt.Sprintf("Register: %s scoped to the sender verified by %q; set rt.Senders[%q]", isAre(bySender[name]), name, name)))
	}
	var ops []Code
	for _, o := range r.Idempotent {
		ops = append(ops, Id(o.idempotencyVar()).Dot("Operation"))
	}
	body = append(body, If(Err().Op(":=").Id("rt").Dot("Engine").Dot("Register").Custom(oneALine("(", ")"), ops...), Err().Op("!=").Nil()).Block(
		Return(append(append([]Code{}, failed...), Qual("fmt", "Errorf").Call(Lit("Register: %w"), Err()))...)))
	background := false
	for _, o := range r.Idempotent {
		if o.X.Complete != idemtype.CompleteBackground {
			continue
		}
		background = true
		body = append(body, Qual(pkgIdem, "RegisterCompleter").Call(Id("rt").Dot("Engine"), Id(o.idempotencyVar()).Dot("Operation"),
			Func().Params(Id("payload").Index().Byte()).Params(Index().Qual(pkgIdem, "Phase").Types(Id(o.StateType())), Error()).Block(
				Var().Id("request").Id(o.RequestType),
				If(Err().Op(":=").Qual("encoding/json", "Unmarshal").Call(Id("payload"), Op("&").Id("request")), Err().Op("!=").Nil()).Block(
					Return(Nil(), Err())),
				Return(Id(o.bindFunc()).Call(Id("phases").Dot(o.GoName), Id("request")), Nil()),
			)))
	}
	if background {
		// Finished without a retry, and without code of the service's.
		body = append(body, Id("rt").Dot("StartCompleter").Call())
	}
	return body
}

// isAre writes names as a subject: "a is", "a and b are", "a, b and c are".
func isAre(names []string) string {
	if len(names) == 1 {
		return names[0] + " is"
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + " are"
}

// routerOf describes the routers of http.Handlers the glue serves: how
// Register takes the router, how a request's route is named (as
// oapi-codegen registers it), how a path parameter is read, and how
// oapi-codegen writes a path for it.
type routerOf struct {
	param     func() Code // Register's router parameter type
	options   string      // oapi-codegen's server options type
	routeName Code        // func(*http.Request) string: the route's "METHOD pattern"
	pathValue Code        // func(*http.Request, string) string, or nil for r.PathValue
	path      func(string) string
	doc       string
}

var httpRouters = map[server]routerOf{
	serverStd: {
		param:     func() Code { return Id("ServeMux") },
		options:   "StdHTTPServerOptions",
		routeName: Func().Params(Id("r").Op("*").Qual("net/http", "Request")).String().Block(Return(Id("r").Dot("Pattern"))),
		path:      codegen.SwaggerUriToStdHttpUri,
		doc:       "a ServeMux such as *http.ServeMux; nil for a new one",
	},
	serverChi: {
		param:   func() Code { return Qual(pkgChi, "Router") },
		options: "ChiServerOptions",
		// The pattern of the router the route was registered on, as
		// oapi-codegen registered it: RoutePattern would join those of
		// the routers it is mounted under, and drop a trailing slash.
		routeName: Func().Params(Id("r").Op("*").Qual("net/http", "Request")).String().Block(
			Id("patterns").Op(":=").Qual(pkgChi, "RouteContext").Call(Id("r").Dot("Context").Call()).Dot("RoutePatterns"),
			If(Len(Id("patterns")).Op("==").Lit(0)).Block(Return(Lit(""))),
			Return(Id("r").Dot("Method").Op("+").Lit(" ").Op("+").Id("patterns").Index(Len(Id("patterns")).Op("-").Lit(1)))),
		pathValue: Func().Params(Id("r").Op("*").Qual("net/http", "Request"), Id("name").String()).String().Block(
			Return(Qual(pkgChi, "URLParam").Call(Id("r"), Id("name")))),
		path: codegen.SwaggerUriToChiUri,
		doc:  "a chi.Router; nil for a new one",
	},
	serverGorilla: {
		param:   func() Code { return Op("*").Qual(pkgGorilla, "Router") },
		options: "GorillaServerOptions",
		routeName: Func().Params(Id("r").Op("*").Qual("net/http", "Request")).String().Block(
			List(Id("path"), Id("_")).Op(":=").Qual(pkgGorilla, "CurrentRoute").Call(Id("r")).Dot("GetPathTemplate").Call(),
			Return(Id("r").Dot("Method").Op("+").Lit(" ").Op("+").Id("path"))),
		pathValue: Func().Params(Id("r").Op("*").Qual("net/http", "Request"), Id("name").String()).String().Block(
			Return(Qual(pkgGorilla, "Vars").Call(Id("r")).Index(Id("name")))),
		path: codegen.SwaggerUriToGorillaUri,
		doc:  "a *mux.Router, nil for a new one; to serve under a prefix, set RegisterOptions.BaseURL rather than passing a PathPrefix sub-router, whose prefix the route's path template would carry",
	},
}

// renderRegisterHTTP writes Register for the routers of http.Handlers
// (net/http's ServeMux, chi, gorilla/mux): oapi-codegen's HandlerWithOptions
// with the strict handler, and the idempotency middleware of each
// idempotent operation among its Middlewares, found by the request's route.
func renderRegisterHTTP(f *File, r *ir) {
	ro := httpRouters[r.Server]
	f.Add(doc(0, "RegisterOptions are the options of oapi-codegen's registration that RegisterWithOptions passes on: those of HandlerWithOptions and NewStrictHandlerWithOptions."))
	f.Type().Id("RegisterOptions").Struct(
		doc(1, "BaseURL is prepended to every route, as by HandlerWithOptions."),
		Id("BaseURL").String(),
		doc(1, "Middlewares wrap each operation's handler, as HandlerWithOptions' do, outside the idempotency middleware of an idempotent operation. To authenticate before a key is claimed, wrap the handler Register returns, or use these."),
		Id("Middlewares").Index().Id("MiddlewareFunc"),
		doc(1, "ErrorHandlerFunc answers a parameter that does not bind, as HandlerWithOptions' does."),
		Id("ErrorHandlerFunc").Func().Params(Id("w").Qual("net/http", "ResponseWriter"), Id("r").Op("*").Qual("net/http", "Request"), Id("err").Error()),
		doc(1, "StrictMiddlewares wrap every strict handler, as NewStrictHandlerWithOptions' middlewares do: they see the typed request and response, of idempotent operations too (there, their response is what the engine stores and replays)."),
		Id("StrictMiddlewares").Index().Id("StrictMiddlewareFunc"),
		doc(1, "StrictOptions are NewStrictHandlerWithOptions' error handlers: a body that does not bind, and an error of a plain handler or of a phase."),
		Id("StrictOptions").Id("StrictHTTPServerOptions"),
	)
	f.Line()
	paragraphs := []string{"Register serves every operation of the spec on router (" + ro.doc + ") and returns the handler that serves them. Idempotent operations get the Idempotency-Key protocol and run their phases from phases through rt's engine; the others are served by plain (nil when every operation is idempotent). Operations completed in the background are registered with the engine's completer."}
	f.Add(doc(0, paragraphs...))
	f.Func().Id("Register").Params(Id("router").Add(ro.param()), Id("plain").Id("PlainHandlers"), Id("phases").Id("Phases"),
		Id("rt").Op("*").Qual(pkgIdemStd, "Runtime")).Params(Qual("net/http", "Handler"), Error()).Block(
		Return(Id("RegisterWithOptions").Call(Id("router"), Id("plain"), Id("phases"), Id("rt"), Id("RegisterOptions").Values())))
	f.Line()

	f.Add(doc(0, "RegisterWithOptions is Register with the options of oapi-codegen's registration."))
	body := registerSetup(r, Nil())
	if ro.pathValue != nil {
		body = append(body, If(Id("rt").Dot("PathValue").Op("==").Nil()).Block(
			Comment("The router's own path parameters, for the fingerprint."),
			Id("withPaths").Op(":=").Op("*").Id("rt"),
			Id("withPaths").Dot("PathValue").Op("=").Add(ro.pathValue),
			Id("rt").Op("=").Op("&").Id("withPaths"),
		))
	} else if renamed := stdRenamed(r); len(renamed) > 0 {
		// net/http's ServeMux names a wildcard as a Go identifier, as
		// oapi-codegen writes it.
		var pairs []kv
		for _, k := range renamed {
			pairs = append(pairs, kv{Lit(k[0]), Lit(k[1])})
		}
		body = append(body, If(Id("rt").Dot("PathValue").Op("==").Nil()).Block(
			Comment("ServeMux's wildcards are named as Go identifiers, as oapi-codegen writes them."),
			Id("wildcards").Op(":=").Map(String()).String().Add(elements(pairs...)),
			Id("withPaths").Op(":=").Op("*").Id("rt"),
			Id("withPaths").Dot("PathValue").Op("=").Func().Params(Id("r").Op("*").Qual("net/http", "Request"), Id("name").String()).String().Block(
				If(List(Id("w"), Id("ok")).Op(":=").Id("wildcards").Index(Id("name")), Id("ok")).Block(Id("name").Op("=").Id("w")),
				Return(Id("r").Dot("PathValue").Call(Id("name")))),
			Id("rt").Op("=").Op("&").Id("withPaths"),
		))
	}
	var routes []kv
	for _, o := range r.Idempotent {
		routes = append(routes, kv{Lit(o.Spec.Method + " ").Op("+").Id("options").Dot("BaseURL").Op("+").Lit(ro.path(o.Spec.Path)), Id(o.idempotencyVar())})
	}
	body = append(body,
		Id("server").Op(":=").Op("&").Id("idemServer").Add(elements(field("plain", Id("plain")), field("phases", Id("phases")), field("rt", Id("rt")))),
		Comment(innermost(r.MiddlewareFirstToLast)),
		Id("idempotency").Op(":=").Qual(pkgIdemStd, "Routes").Call(Id("rt"), ro.routeName, Map(String()).Op("*").Qual(pkgIdemStd, "Spec").Add(elements(routes...))),
		Return(Id("HandlerWithOptions").Call(
			Id("NewStrictHandlerWithOptions").Call(Id("server"), Id("options").Dot("StrictMiddlewares"), Id("options").Dot("StrictOptions")),
			Id(ro.options).Add(elements(
				field("BaseURL", Id("options").Dot("BaseURL")),
				field("BaseRouter", Id("router")),
				field("Middlewares", middlewaresCode(r.MiddlewareFirstToLast)),
				field("ErrorHandlerFunc", Id("options").Dot("ErrorHandlerFunc")),
			))), Nil()),
	)
	f.Func().Id("RegisterWithOptions").Params(Id("router").Add(ro.param()), Id("plain").Id("PlainHandlers"), Id("phases").Id("Phases"),
		Id("rt").Op("*").Qual(pkgIdemStd, "Runtime"), Id("options").Id("RegisterOptions")).Params(Qual("net/http", "Handler"), Error()).Block(body...)
}

// innermost says where the idempotency middleware goes among
// oapi-codegen's Middlewares: innermost, next to the strict handler, so
// that the service's own (authentication) run before a key is claimed.
func innermost(firstToLast bool) string {
	if firstToLast {
		return "Innermost of the operations' middlewares: with the config's apply-*-middleware-first-to-last, oapi-codegen applies them last to first, the last innermost."
	}
	return "Innermost of the operations' middlewares: oapi-codegen applies them in order, each around the ones before."
}

// middlewaresCode writes the Middlewares option: the service's, with the
// idempotency middleware where it runs innermost.
func middlewaresCode(firstToLast bool) Code {
	if firstToLast {
		return Append(Append(Index().Id("MiddlewareFunc").Values(), Id("options").Dot("Middlewares").Op("...")), Id("idempotency"))
	}
	return Append(Index().Id("MiddlewareFunc").Values(Id("idempotency")), Id("options").Dot("Middlewares").Op("..."))
}

// stdRenamed lists the path parameters of the idempotent operations whose
// ServeMux wildcard oapi-codegen names otherwise (a name that is not a Go
// identifier), as {OpenAPI name, wildcard} pairs, in spec order.
func stdRenamed(r *ir) [][2]string {
	var out [][2]string
	seen := map[string]bool{}
	for _, o := range r.Idempotent {
		for _, name := range idemhttp.RouteParams(o.Spec.Path) {
			if w := codegen.SanitizeGoIdentifier(name); w != name && !seen[name] {
				seen[name] = true
				out = append(out, [2]string{name, w})
			}
		}
	}
	return out
}

// renderRegisterGin writes Register for gin: oapi-codegen's
// RegisterHandlersWithOptions with the strict handler, on a router that
// puts the idempotency middleware of each idempotent operation in front
// of its handler (idemgin.Router): oapi-codegen's gin Middlewares run one
// after another inside the handler and could not see its end.
func renderRegisterGin(f *File, r *ir) {
	f.Add(doc(0, "RegisterOptions are the options of oapi-codegen's registration that RegisterWithOptions passes on: those of RegisterHandlersWithOptions and NewStrictHandler."))
	f.Type().Id("RegisterOptions").Struct(
		doc(1, "BaseURL is prepended to every route, as by RegisterHandlersWithOptions. To serve the API in a gin group, pass the group as the router."),
		Id("BaseURL").String(),
		doc(1, "Middlewares run before each operation's handler, as RegisterHandlersWithOptions' do: after the idempotency middleware of an idempotent operation. To authenticate before a key is claimed, use gin middleware on the router (router.Use)."),
		Id("Middlewares").Index().Id("MiddlewareFunc"),
		doc(1, "ErrorHandler answers a parameter that does not bind, as RegisterHandlersWithOptions' does."),
		Id("ErrorHandler").Func().Params(Op("*").Qual(pkgGin, "Context"), Error(), Int()),
		doc(1, "StrictMiddlewares wrap every strict handler, as NewStrictHandler's middlewares do: they see the typed request and response, of idempotent operations too (there, their response is what the engine stores and replays)."),
		Id("StrictMiddlewares").Index().Id("StrictMiddlewareFunc"),
	)
	f.Line()
	f.Add(doc(0, "Register serves every operation of the spec on router (a *gin.Engine or *gin.RouterGroup). Idempotent operations get the Idempotency-Key protocol and run their phases from phases through rt's engine; the others are served by plain (nil when every operation is idempotent). Operations completed in the background are registered with the engine's completer."))
	f.Func().Id("Register").Params(Id("router").Qual(pkgGin, "IRouter"), Id("plain").Id("PlainHandlers"), Id("phases").Id("Phases"),
		Id("rt").Op("*").Qual(pkgIdemGin, "Runtime")).Error().Block(
		Return(Id("RegisterWithOptions").Call(Id("router"), Id("plain"), Id("phases"), Id("rt"), Id("RegisterOptions").Values())))
	f.Line()
	f.Add(doc(0, "RegisterWithOptions is Register with the options of oapi-codegen's registration."))
	body := registerSetup(r)
	var routes []kv
	for _, o := range r.Idempotent {
		routes = append(routes, kv{Lit(o.Spec.Method + " ").Op("+").Id("options").Dot("BaseURL").Op("+").Lit(codegen.SwaggerUriToGinUri(o.Spec.Path)),
			Qual(pkgIdemGin, "Middleware").Call(Id("rt"), Id(o.idempotencyVar()))})
	}
	body = append(body,
		Id("server").Op(":=").Op("&").Id("idemServer").Add(elements(field("plain", Id("plain")), field("phases", Id("phases")), field("rt", Id("rt")))),
		Id("idempotency").Op(":=").Map(String()).Qual(pkgGin, "HandlerFunc").Add(elements(routes...)),
		Id("RegisterHandlersWithOptions").Call(Qual(pkgIdemGin, "Router").Call(Id("router"), Id("idempotency")),
			Id("NewStrictHandler").Call(Id("server"), Id("options").Dot("StrictMiddlewares")),
			Id("GinServerOptions").Add(elements(
				field("BaseURL", Id("options").Dot("BaseURL")),
				field("Middlewares", Id("options").Dot("Middlewares")),
				field("ErrorHandler", Id("options").Dot("ErrorHandler")),
			))),
		Return(Nil()),
	)
	f.Func().Id("RegisterWithOptions").Params(Id("router").Qual(pkgGin, "IRouter"), Id("plain").Id("PlainHandlers"), Id("phases").Id("Phases"),
		Id("rt").Op("*").Qual(pkgIdemGin, "Runtime"), Id("options").Id("RegisterOptions")).Error().Block(body...)
}

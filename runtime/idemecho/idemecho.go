// Package idemecho connects the idempotency engine to echo. Generated code
// installs Middleware on each idempotent route and calls Execute from the
// operation's strict handler; users rarely call either directly.
//
// The middleware does everything that needs the raw request: it verifies a
// signed sender, parses the key (from its header or the JSON body), resolves
// the scope, reads the body and fingerprints the request, and answers
// protocol errors as problem+json. Execute, called with the typed
// request after oapi-codegen bound and validated it, runs the phases through
// the engine and returns the response to send, which is the stored response
// on a replay.
package idemecho

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemsig"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// ScopeResolver returns the principal a request's key is scoped to (an
// account or tenant ID). An error is returned to echo as is; an empty
// principal is answered 401.
type ScopeResolver func(c echo.Context) (string, error)

// Runtime is what every idempotent route shares.
type Runtime struct {
	Engine *idem.Engine
	// Principal resolves scope "principal". Required when an operation uses it.
	Principal ScopeResolver
	// Senders verifies the senders of operations scoped "sender:<name>",
	// by name: the verifier runs over the raw body before anything is
	// claimed, a refusal is 401 invalid-signature, and the sender it
	// returns scopes the key. Required for each name an operation uses.
	Senders map[string]idemsig.Verifier
	// MaxBodyBytes limits request bodies read for fingerprinting (default
	// 1 MiB); larger bodies are answered 413.
	MaxBodyBytes int64
	// Logger, when set, gets one line per idempotent request with the key
	// and whether it was replayed.
	Logger *slog.Logger
	// Context bounds the background work the generated Register starts:
	// the completer of operations with complete: background (see
	// StartCompleter) runs until it is done. Default: context.Background(),
	// the life of the process.
	Context context.Context
	// CompleterInterval is how often that completer looks for abandoned
	// executions (default DefaultCompleterInterval). Negative: Register
	// starts none, and the service runs Engine.RunCompleter itself.
	CompleterInterval time.Duration
}

// DefaultMaxBodyBytes is Runtime.MaxBodyBytes' default.
const DefaultMaxBodyBytes = 1 << 20

// DefaultCompleterInterval is Runtime.CompleterInterval's default.
const DefaultCompleterInterval = 10 * time.Second

// StartCompleter starts the engine's background completer
// (Engine.RunCompleter) in a goroutine of its own, every
// rt.CompleterInterval until rt.Context is done, unless CompleterInterval
// is negative. The generated Register calls it when the spec has an
// operation with complete: background, so that such an operation is
// finished without a retry and without code of the service's.
func (rt *Runtime) StartCompleter() {
	interval := rt.CompleterInterval
	switch {
	case interval < 0:
		return
	case interval == 0:
		interval = DefaultCompleterInterval
	}
	ctx := rt.Context
	if ctx == nil {
		ctx = context.Background()
	}
	go rt.Engine.RunCompleter(ctx, interval)
}

// Spec is one idempotent operation as the generator describes it.
type Spec struct {
	Operation *idem.Operation
	Key       idemhttp.KeyRule
	// Scope is what keys are unique within; the zero Scope is the
	// principal's.
	Scope idemtype.Scope
	// Route is the OpenAPI path template, e.g. /payments/{id}.
	Route string
	// Exclude lists JSON Pointers left out of the fingerprint.
	Exclude []string
	// Headers lists request headers that are part of the fingerprint.
	Headers []string
}

// Call is an idempotent request in flight. The middleware puts it in the
// request's context; Execute fills in the outcome.
type Call struct {
	Spec    *Spec
	Request idem.KeyedRequest // Key is "" when an optional key was not sent
	// Replayed is set when the response is a stored one.
	Replayed bool
	// Resumed is set when this request continued an earlier execution.
	Resumed bool
	// problem is the refusal Execute answered with, if any.
	problem *idemtype.Error

	// The request's context and body as the middleware hands them on,
	// allocated with the call.
	ctx  callContext
	body bodyReader
}

type callKey struct{}

// callContext is the request's context with the call as the value of
// callKey{}, as context.WithValue would make it.
type callContext struct {
	context.Context
	call *Call
}

func (c *callContext) Value(key any) any {
	if key == (callKey{}) {
		return c.call
	}
	return c.Context.Value(key)
}

// bodyReader is the request body once read, for the handler to read again.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

// CallFrom returns the idempotent call of ctx, or nil.
func CallFrom(ctx context.Context) *Call {
	c, _ := ctx.Value(callKey{}).(*Call)
	return c
}

// Middleware returns the echo middleware for one idempotent route.
//
// Errors go up echo's chain as echo's own middlewares return them (its
// request logger, for one): an error of the handler is rendered by echo's
// HTTPErrorHandler at once, so the response and the log line agree, and is
// then returned, for an outer logger or tracer to see. A protocol refusal
// (a missing key, a reused one, a claim in flight) is written as
// problem+json and returned as an *echo.HTTPError of the same status whose
// Internal error is the *idemtype.Error. Either way the response is committed
// before the error travels up, so an HTTPErrorHandler must leave committed
// responses alone, as echo's default one and HTTPErrorHandler do.
func Middleware(rt *Runtime, spec *Spec) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			call, err := prepare(c, rt, spec)
			if err != nil {
				var perr *idemtype.Error
				if errors.As(err, &perr) {
					rt.Engine.ObserveContext(c.Request().Context(), idem.Event{Kind: idem.EventBadRequest, Operation: spec.Operation.ID})
					rt.log(c, call, perr.Status(), nil)
					if err := WriteResponse(c.Response(), idem.ProblemResponse(perr, rt.Engine.PolicyURL()), false); err != nil {
						return err
					}
					return refusal(perr)
				}
				return err
			}
			req := c.Request()
			call.ctx = callContext{Context: req.Context(), call: call}
			c.SetRequest(req.WithContext(&call.ctx))
			err = next(c)
			if err != nil {
				// Render the error now, so the log line has the status sent.
				c.Error(err)
			}
			rt.log(c, call, c.Response().Status, err)
			if err == nil && call.problem != nil {
				return refusal(call.problem)
			}
			return err
		}
	}
}

// refusal is the error a protocol refusal returns up echo's chain, once its
// problem was written.
func refusal(perr *idemtype.Error) error {
	return echo.NewHTTPError(perr.Status(), perr.Error()).SetInternal(perr)
}

func (rt *Runtime) log(c echo.Context, call *Call, status int, err error) {
	if rt.Logger == nil {
		return
	}
	attrs := []any{"method", c.Request().Method, "path", c.Request().URL.Path, "status", status}
	if call != nil {
		attrs = append(attrs, "operation", call.Spec.Operation.ID, "idempotency_key", call.Request.Key,
			"replayed", call.Replayed, "resumed", call.Resumed)
	}
	if err != nil {
		attrs = append(attrs, "err", err.Error())
	}
	// With the request's context: a handler that reads it (idemotel's
	// LogHandler) adds the request's trace to the line.
	rt.Logger.InfoContext(c.Request().Context(), "idempotent request", attrs...)
}

// prepare reads what identifies the request: its key, its scope, its
// fingerprint. A signed sender is verified first, over the raw body, so
// that an unauthenticated request learns nothing about keys; otherwise the
// key header and the scope are checked before the body is read, as cheap
// refusals.
func prepare(c echo.Context, rt *Runtime, spec *Spec) (*Call, error) {
	r := c.Request()
	call := &Call{Spec: spec}
	signed := spec.Scope.Kind == idemtype.ScopeSender
	headerKey := func() (err error) {
		if spec.Key.Pointer == "" {
			call.Request.Key, err = idemhttp.ParseKey(r.Header, spec.Key)
		}
		return err
	}
	var err error
	if !signed {
		if err := headerKey(); err != nil {
			return call, err
		}
		if call.Request.Scope, err = rt.scope(c, spec); err != nil {
			return call, err
		}
	}
	limit := rt.MaxBodyBytes
	if limit <= 0 {
		limit = DefaultMaxBodyBytes
	}
	body, err := readBody(r, limit)
	if err != nil {
		return call, echo.NewHTTPError(http.StatusBadRequest, "reading the request body: "+err.Error())
	}
	if int64(len(body)) > limit {
		return call, echo.NewHTTPError(http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body exceeds %d bytes", limit))
	}
	call.body.Reset(body)
	r.Body = &call.body
	if signed {
		if call.Request.Scope, err = rt.verify(r, body, spec.Scope.Name, spec); err != nil {
			return call, err
		}
		if err := headerKey(); err != nil {
			return call, err
		}
	}
	if spec.Key.Pointer != "" {
		if call.Request.Key, err = idemhttp.BodyKey(body, spec.Key); err != nil {
			return call, err
		}
	}
	if call.Request.Key == "" {
		return call, nil // optional key not sent: no fingerprint needed
	}
	var params map[string]string
	if names, values := c.ParamNames(), c.ParamValues(); len(names) > 0 {
		params = make(map[string]string, len(names))
		for i, name := range names {
			if i < len(values) {
				params[name] = values[i]
			}
		}
	}
	var query url.Values
	if r.URL.RawQuery != "" {
		query = r.URL.Query()
	}
	call.Request.Fingerprint, err = idemhttp.Fingerprint(idemhttp.Request{
		Method: r.Method, Route: spec.Route, PathParams: params, Query: query,
		Header: r.Header, HeaderNames: spec.Headers, ContentType: r.Header.Get("Content-Type"),
		Body: body, Exclude: spec.Exclude,
	})
	return call, err
}

// readBody reads at most limit+1 bytes of r's body (as io.ReadAll of an
// io.LimitReader would), into a slice the size its Content-Length announces.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	size := int64(512)
	if r.ContentLength >= 0 && r.ContentLength <= limit {
		size = r.ContentLength + 1 // room to read the end of the body
	}
	b := make([]byte, 0, size)
	for int64(len(b)) <= limit {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		room := b[len(b):cap(b)]
		if int64(len(room)) > limit+1-int64(len(b)) {
			room = room[:limit+1-int64(len(b))]
		}
		n, err := r.Body.Read(room)
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

// verify runs the sender verifier of an operation scoped "sender:<name>"
// and returns the sender. Refusals are invalid-signature problems; a
// verifier's own failure goes to echo as is.
func (rt *Runtime) verify(r *http.Request, body []byte, name string, spec *Spec) (string, error) {
	v := rt.Senders[name]
	if v == nil {
		return "", errors.New("idemecho: operation " + spec.Operation.ID + " is scoped to sender " + name + " but Runtime.Senders has no verifier of that name")
	}
	sender, err := v.Verify(r, body)
	if err != nil {
		var perr *idemtype.Error // only here: errors.As makes it escape to the heap
		switch {
		case errors.Is(err, idemsig.ErrInvalid):
			return "", &idemtype.Error{Kind: idemtype.KindInvalidSignature, Detail: err.Error()}
		case errors.As(err, &perr):
			return "", err
		}
		return "", fmt.Errorf("idemecho: verifying the sender of %s: %w", spec.Operation.ID, err)
	}
	if sender == "" {
		return "", &idemtype.Error{Kind: idemtype.KindInvalidSignature, Detail: "the verifier found no sender"}
	}
	return sender, idem.CheckScope(sender)
}

func (rt *Runtime) scope(c echo.Context, spec *Spec) (string, error) {
	switch spec.Scope.Kind {
	case idemtype.ScopeGlobal:
		return "", nil
	case idemtype.ScopeHeader:
		name := spec.Scope.Name
		v := c.Request().Header.Get(name)
		if v == "" {
			return "", &idemtype.Error{Kind: idemtype.KindMissingScope, Detail: "send the " + name + " header: keys are scoped to it"}
		}
		return v, idem.CheckScope(v)
	default: // principal
		if rt.Principal == nil {
			return "", errors.New("idemecho: operation " + spec.Operation.ID + " is scoped to the principal but Runtime.Principal is nil")
		}
		p, err := rt.Principal(c)
		if err != nil {
			return "", err
		}
		if p == "" {
			return "", &idemtype.Error{Kind: idemtype.KindMissingScope, Detail: "authenticate: keys are scoped to the caller"}
		}
		return p, idem.CheckScope(p)
	}
}

// Execute runs the phases of the call in ctx's request for typed request
// payload (stored for background completion) and returns the response to
// send: a fresh one, a replay, or a problem. A ReleaseError's cause is
// returned as the error, for echo's error handler (return an
// *echo.HTTPError from a phase, wrapped in idem.Release, to choose the
// status).
func Execute[S any](ctx context.Context, rt *Runtime, payload []byte, phases []idem.Phase[S]) (*idem.Response, error) {
	call := CallFrom(ctx)
	if call == nil {
		return nil, errors.New("idemecho: Execute called outside the idempotency middleware")
	}
	op := call.Spec.Operation
	if call.Request.Key == "" {
		return idem.RunWithoutKey(ctx, rt.Engine, op, phases)
	}
	req := call.Request
	req.Payload = payload
	out, err := idem.Run(ctx, rt.Engine, op, req, phases)
	if err != nil {
		// Declared only here: errors.As makes them escape to the heap.
		var perr *idemtype.Error
		if errors.As(err, &perr) {
			call.problem = perr
			return idem.ProblemResponse(perr, rt.Engine.PolicyURL()), nil
		}
		var rel *idem.ReleaseError
		if errors.As(err, &rel) {
			return nil, rel.Err
		}
		return nil, err
	}
	call.Replayed, call.Resumed = out.Replayed, out.Resumed
	return out.Response, nil
}

// Render runs a strict-server response visitor against a recorder and
// returns the exact response it wrote, so the bytes can be stored before
// anything reaches the client.
func Render(visit func(http.ResponseWriter) error) (*idem.Response, error) {
	rec := &recorder{resp: idem.Response{Header: http.Header{}}}
	rec.body = *bytes.NewBuffer(rec.small[:0])
	if err := visit(rec); err != nil {
		return nil, err
	}
	if rec.resp.Status == 0 {
		rec.resp.Status = http.StatusOK
	}
	rec.resp.Body = rec.body.Bytes()
	return &rec.resp, nil
}

// recorder is the response a visitor writes and the room for a small body,
// in one allocation.
type recorder struct {
	resp  idem.Response
	body  bytes.Buffer
	small [128]byte
}

func (r *recorder) Header() http.Header { return r.resp.Header }
func (r *recorder) WriteHeader(status int) {
	if r.resp.Status == 0 {
		r.resp.Status = status
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.resp.Status == 0 {
		r.resp.Status = http.StatusOK
	}
	return r.body.Write(b)
}

// WriteResponse writes a stored or fresh response. A replay carries
// Idempotent-Replayed: true.
func WriteResponse(w http.ResponseWriter, r *idem.Response, replayed bool) error {
	// The values are copied, so that nothing done to the response's
	// headers reaches the stored response: into one slice, each header
	// getting a part of it without room to append into the next.
	n := 0
	for _, v := range r.Header {
		n += len(v)
	}
	if replayed {
		n++
	}
	vals := make([]string, n)
	h := w.Header()
	for k, v := range r.Header {
		if len(v) == 0 {
			h[k] = nil
			continue
		}
		c := copy(vals, v)
		h[k], vals = vals[:c:c], vals[c:]
	}
	if replayed {
		vals[0] = "true"
		h[idemtype.ReplayedHeader] = vals[:1:1]
	}
	w.WriteHeader(r.Status)
	_, err := w.Write(r.Body)
	return err
}

// Writer is a strict-server response object for any generated response
// interface: generated code wraps it so its Visit method writes the
// engine's response, replay header included.
func Writer(ctx context.Context, r *idem.Response) func(http.ResponseWriter) error {
	replayed := false
	if call := CallFrom(ctx); call != nil {
		replayed = call.Replayed
	}
	return func(w http.ResponseWriter) error { return WriteResponse(w, r, replayed) }
}

// OperationMiddlewares returns the per-operation middlewares to give
// oapi-codegen's RegisterHandlersOptions, by operationId, for the operations
// in ops: the user's own first (outermost: authenticate there, before a key
// is claimed), then idemgen's (the idempotency middleware of an idempotent
// operation), then, innermost, next to the strict handler, onError when it
// is set. onError receives every error of the strict handler (a body that
// does not bind, an error of a plain handler or of a phase) before anything
// above it does; what it returns goes on up the chain, nil when it wrote the
// response itself. Generated Register functions call it.
func OperationMiddlewares(user map[string][]echo.MiddlewareFunc, ours map[string]echo.MiddlewareFunc,
	onError func(c echo.Context, err error) error, ops []string) map[string][]echo.MiddlewareFunc {
	out := make(map[string][]echo.MiddlewareFunc, len(ops))
	for _, op := range ops {
		mws := append([]echo.MiddlewareFunc(nil), user[op]...)
		if m := ours[op]; m != nil {
			mws = append(mws, m)
		}
		if onError != nil {
			mws = append(mws, errorMiddleware(onError))
		}
		if len(mws) > 0 {
			out[op] = mws
		}
	}
	return out
}

func errorMiddleware(onError func(echo.Context, error) error) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if err := next(c); err != nil {
				return onError(c, err)
			}
			return nil
		}
	}
}

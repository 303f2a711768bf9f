// Package idemstd connects the idempotency engine to net/http: the
// standard library's ServeMux, and the routers whose handlers are
// http.Handlers (chi, gorilla/mux). It is also the protocol's one
// framework-free core, on net/http types, that every adapter builds on
// (runtime/idemecho, and the gin adapter in a module of its own): reading
// the key and the scope, fingerprinting the request, answering refusals,
// running the phases through the engine and writing the stored response.
//
// Generated code installs Middleware on each idempotent route and calls
// Execute from the operation's strict handler; users rarely call either
// directly.
package idemstd

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemapi"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemsig"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Spec is one idempotent operation as the generator describes it.
type Spec struct {
	Operation *idem.Operation
	Key       idemhttp.KeyRule
	// Scope is what keys are unique within; the zero Scope is the
	// principal's.
	Scope idemtype.Scope
	// Placement is the value of the request its records are placed by
	// (KeyedRequest.Placement); the zero Placement is none.
	Placement idemtype.Placement
	// NaturalKey lists the request values that identify the operation's
	// intent in business terms (body pointers, path parameters), whose
	// digest its completed record keeps (KeyedRequest.NaturalKey); none
	// when empty.
	NaturalKey []idemtype.Placement
	// Route is the OpenAPI path template, e.g. /payments/{id}.
	Route string
	// Exclude lists JSON Pointers left out of the fingerprint.
	Exclude []string
	// Headers lists request headers that are part of the fingerprint.
	Headers []string
	// MaxBodyBytes limits this operation's request body (the extension's
	// request.maxBodyBytes); 0 leaves it to Options.MaxBodyBytes.
	MaxBodyBytes int64
	// MediaTypes are the media types the operation's request body may have
	// (the spec's requestBody content, wildcards such as application/*
	// included); a body of another is the unsupported-media-type problem
	// (415) before anything is claimed. Empty: any.
	MediaTypes []string
	// BindsStrict says that the route's handler is generated glue over an
	// oapi-codegen strict handler whose outermost strict middleware calls
	// Call.MarkBound: an error the handler returns before it is the
	// binder's, which the adapter answers 400. A hand-written handler's
	// error stays the service's.
	BindsStrict bool
}

// Call is an idempotent request in flight. An adapter's middleware puts it
// in the request's context (Prepare, then Call.Bind); Execute fills in the
// outcome.
type Call struct {
	Spec    *Spec
	Request idem.KeyedRequest // Key is "" when an optional key was not sent
	// Replayed is set when the response is a stored one.
	Replayed bool
	// Resumed is set when this request continued an earlier execution
	// (a takeover), whether or not it then succeeded.
	Resumed bool
	// FailedPhase names the phase that failed, when one did.
	FailedPhase string
	// RequestID is the request's id, sent in Headers.RequestID on every
	// answer and logged with the request's line; "" when the engine's
	// Options.Headers name no such header.
	RequestID string
	// headers are the engine's Options.Headers, as Prepare got them.
	headers idemapi.Headers
	// logScope shows a scope in the request's log line (Options.LogScope).
	logScope func(string) string
	// sentKey is the key header's value as the client sent it, echoed
	// when headers.EchoKey.
	sentKey string
	// problem is the refusal Execute answered with, if any.
	problem *idemtype.Error
	// executed is set once Execute runs: from then on the engine answers.
	executed bool
	// bound is set once the strict server bound the request (MarkBound).
	bound bool
	// userAgent is a keyless request's User-Agent (Engine.Keyless).
	userAgent string

	// The request's context, body and response writer as the middleware
	// hands them on, allocated with the call.
	ctx   callContext
	body  bodyReader
	guard Guard
}

// Guard is the response writer a handler writes a keyed request's answer
// through (Call.Guard). It remembers the status sent, for the log line; and
// a 400 written before Execute ran (a body the framework's binder refuses)
// becomes the key's stored answer instead, when the key's record is
// complete for this very request (Engine.Replay): a completed key's answer
// does not depend on the binder, which may refuse what the fingerprint
// reads as equal (9.0 for an integer 9). Other answers pass unchanged.
type Guard struct {
	http.ResponseWriter
	call     *Call
	eng      *idem.Engine
	ctx      context.Context
	status   int
	replayed bool // the 400 was replaced: what the handler writes next is dropped
}

// Guard returns the call's writer in front of w, for the handler to write
// through. The headers every answer carries (SetHeaders) are set on w
// first, so that an answer the framework or the service's error handler
// writes carries them too.
func (c *Call) Guard(ctx context.Context, w http.ResponseWriter, eng *idem.Engine) *Guard {
	c.SetHeaders(w.Header())
	c.guard = Guard{ResponseWriter: w, call: c, eng: eng, ctx: ctx}
	return &c.guard
}

// SetHeaders sets on h the headers every answer to the call carries, as
// the engine's Options.Headers name them: the request's id, and its key as
// the client sent it.
func (c *Call) SetHeaders(h http.Header) {
	if c == nil {
		return
	}
	if c.RequestID != "" {
		h.Set(c.headers.RequestID, c.RequestID)
	}
	if c.headers.EchoKey && c.sentKey != "" {
		name := c.Spec.Key.Header
		if name == "" {
			name = idemtype.DefaultKeyHeader
		}
		h.Set(name, c.sentKey)
	}
}

// replayHeaders sets on h, the headers of a replay, the call's request id,
// and the stored one (the first execution's) as the original request's.
func (c *Call) replayHeaders(h http.Header) {
	if c == nil || c.RequestID == "" {
		return
	}
	name := c.headers.RequestID
	if orig := h.Get(name); orig != "" && c.headers.OriginalRequest != "" && orig != c.RequestID {
		h.Set(c.headers.OriginalRequest, orig)
	}
	h.Set(name, c.RequestID)
}

// WriteHeader sends status, or the stored answer in place of a binder's
// 400.
func (w *Guard) WriteHeader(status int) {
	switch {
	case w.replayed:
		return
	case w.status == 0 && status == http.StatusBadRequest && !w.call.executed && w.call.Request.Key != "":
		if resp, err := w.eng.Replay(w.ctx, w.call.Spec.Operation, w.call.Request); err == nil && resp != nil {
			// The binder's own headers describe its body, which is dropped.
			h := w.ResponseWriter.Header()
			h.Del("Content-Type")
			h.Del("Content-Length")
			h.Del("X-Content-Type-Options") // http.Error's

			w.replayed, w.status, w.call.Replayed = true, resp.Status, true
			writeResponse(w.ResponseWriter, resp, true, w.call)
			return
		}
	}
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

// Write writes b, or drops it after a replaced 400.
func (w *Guard) Write(b []byte) (int, error) {
	if w.replayed {
		return len(b), nil
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Status is the status sent, 0 before anything was.
func (w *Guard) Status() int { return w.status }

// Replaced reports whether a binder's 400 was replaced by the stored
// answer: the error the handler returns with it is answered already.
func (w *Guard) Replaced() bool { return w.replayed }

// Flush flushes the writer beneath, when it can.
func (w *Guard) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the writer beneath.
func (w *Guard) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// MarkBound records that the framework bound the request (its body
// decoded into the operation's type): an error before it is the binder's.
// Generated glue calls it from its outermost strict middleware.
func (c *Call) MarkBound() { c.bound = true }

// Unbound reports whether the request failed before the framework bound
// it: its route's handler binds strictly (Spec.BindsStrict) and neither
// MarkBound nor Execute ran.
func (c *Call) Unbound() bool { return c.Spec.BindsStrict && !c.bound && !c.executed }

// Problem is the refusal Execute answered the call with (a key in flight,
// reused with another request, ...), or nil.
func (c *Call) Problem() *idemtype.Error { return c.problem }

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

// Bind returns r with the call in its context and the body Prepare read
// as its body, for the handler to read again.
func (c *Call) Bind(r *http.Request) *http.Request {
	c.ctx = callContext{Context: r.Context(), call: c}
	r = r.WithContext(&c.ctx)
	r.Body = &c.body
	return r
}

// Options are what Prepare needs of a service's configuration.
type Options struct {
	// Senders verifies the senders of operations scoped "sender:<name>",
	// by name (see Runtime.Senders).
	Senders map[string]idemsig.Verifier
	// MaxBodyBytes limits request bodies read for fingerprinting (default
	// DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// Headers are the engine's Options.Headers (Engine.Headers): the
	// headers every answer carries.
	Headers idemapi.Headers
	// LogScope shows a scope in the request's log line: the engine's
	// Engine.LogScope (nil: its default, a digest).
	LogScope func(string) string
	// Placement maps the principal to the placement of an operation placed
	// by it (placement: principal; see Runtime.Placement).
	Placement func(principal string) (string, error)
}

// DefaultMaxBodyBytes is the default limit of request bodies.
const DefaultMaxBodyBytes = 1 << 20

// Route is what an adapter's router knows of a request.
type Route struct {
	// PathParams returns the route's path parameters by name. Prepare asks
	// only when it fingerprints the request.
	PathParams func() map[string]string
	// Principal resolves the principal of an operation scoped to it
	// (nil: the service set no resolver).
	Principal func() (string, error)
}

// accepts reports whether a body of media type contentType (a
// Content-Type header) is one of types, which may hold type/* and */*.
func accepts(types []string, contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	for _, t := range types {
		t = strings.ToLower(strings.TrimSpace(strings.SplitN(t, ";", 2)[0]))
		if t == mt || t == "*/*" || strings.HasSuffix(t, "/*") && strings.HasPrefix(mt, strings.TrimSuffix(t, "*")) {
			return true
		}
	}
	return false
}

// BodyError is a request body Prepare could not read: its Status is 400.
// An adapter renders it its framework's way. (A body over the limit is a
// refusal, an *idemtype.Error of kind request-too-large: a 413 problem.)
type BodyError struct {
	Status int
	Err    error
}

func (e *BodyError) Error() string { return e.Err.Error() }
func (e *BodyError) Unwrap() error { return e.Err }

// Prepare reads what identifies the request: its key, its scope, its
// fingerprint. A signed sender is verified first, over the raw body, so
// that an unauthenticated request learns nothing about keys; otherwise the
// key header and the scope are checked before the body is read, as cheap
// refusals. A refusal is an *idemtype.Error, which the adapter answers as
// a problem; a body it cannot take is a *BodyError; any other error is the
// service's (a failing resolver or verifier). The call is returned with
// every error, with what was read so far.
func Prepare(r *http.Request, o *Options, spec *Spec, route Route) (*Call, error) {
	call := &Call{Spec: spec, headers: o.Headers, logScope: o.LogScope}
	if call.logScope == nil {
		call.logScope = (*idem.Engine)(nil).LogScope
	}
	if o.Headers.RequestID != "" {
		call.RequestID = o.Headers.NewID()
		call.Request.RequestID = call.RequestID
	}
	signed := spec.Scope.Kind == idemtype.ScopeSender
	headerKey := func() (err error) {
		if spec.Key.Pointer == "" {
			call.Request.Key, err = idemhttp.ParseKey(r.Header, spec.Key)
			if err == nil && call.Request.Key != "" && o.Headers.EchoKey {
				call.sentKey = r.Header.Get(cmp.Or(spec.Key.Header, idemtype.DefaultKeyHeader))
			}
		}
		return err
	}
	var err error
	if !signed {
		if err := headerKey(); err != nil {
			return call, err
		}
		if call.Request.Scope, err = scope(r, spec, route); err != nil {
			return call, err
		}
	}
	limit := spec.MaxBodyBytes
	if limit <= 0 {
		limit = o.MaxBodyBytes
	}
	if limit <= 0 {
		limit = DefaultMaxBodyBytes
	}
	body, err := readBody(r, limit)
	if err != nil {
		return call, &BodyError{Status: http.StatusBadRequest, Err: fmt.Errorf("reading the request body: %w", err)}
	}
	if int64(len(body)) > limit {
		return call, &idemtype.Error{Kind: idemtype.KindTooLarge, Detail: fmt.Sprintf("the request body exceeds the %d bytes this operation accepts", limit)}
	}
	if len(body) > 0 && len(spec.MediaTypes) > 0 && !accepts(spec.MediaTypes, r.Header.Get("Content-Type")) {
		return call, &idemtype.Error{Kind: idemtype.KindMediaType, Detail: fmt.Sprintf("the body is %q; this operation accepts %s",
			r.Header.Get("Content-Type"), strings.Join(spec.MediaTypes, ", "))}
	}
	call.body.Reset(body)
	r.Body = &call.body
	if signed {
		if call.Request.Scope, err = verify(r, body, o.Senders[spec.Scope.Name], spec); err != nil {
			return call, err
		}
		call.Request.ScopePublic = true // a sender's name, from the spec
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
		call.userAgent = r.UserAgent() // for EventKeyless, in Execute
		return call, nil               // optional key not sent: no fingerprint needed
	}
	if len(spec.NaturalKey) > 0 {
		call.Request.NaturalKey = naturalKey(body, spec, route)
	}
	if !spec.Placement.IsZero() {
		if call.Request.Placement, err = placement(r, body, o, spec, route); err != nil {
			return call, err
		}
	}
	call.Request.IntentAge, call.Request.IntentAgeSent = idemhttp.IntentAge(r.Header)
	call.Request.Wait, call.Request.WaitSent = idemhttp.PreferWait(r.Header)
	var params map[string]string
	if route.PathParams != nil {
		params = route.PathParams()
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

// verify runs the sender verifier v of an operation scoped
// "sender:<name>" and returns the sender. Refusals are invalid-signature
// problems; a verifier's own failure is returned as the service's error.
func verify(r *http.Request, body []byte, v idemsig.Verifier, spec *Spec) (string, error) {
	if v == nil {
		return "", errors.New("idem: operation " + spec.Operation.ID + " is scoped to sender " + spec.Scope.Name + " but the runtime's Senders has no verifier of that name")
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
		return "", fmt.Errorf("idem: verifying the sender of %s: %w", spec.Operation.ID, err)
	}
	if sender == "" {
		return "", &idemtype.Error{Kind: idemtype.KindInvalidSignature, Detail: "the verifier found no sender"}
	}
	return sender, idemtype.CheckScope(sender)
}

func scope(r *http.Request, spec *Spec, route Route) (string, error) {
	var v string
	switch sc := spec.Scope; sc.Kind {
	case idemtype.ScopeGlobal:
		return "", nil
	case idemtype.ScopeHeader:
		if v = r.Header.Get(sc.Name); v == "" {
			return "", &idemtype.Error{Kind: idemtype.KindMissingScope, Detail: "send the " + sc.Name + " header: keys are scoped to it"}
		}
	case idemtype.ScopePath:
		if route.PathParams != nil {
			v = route.PathParams()[sc.Name]
		}
		if v == "" {
			return "", &idemtype.Error{Kind: idemtype.KindMissingScope, Detail: "the path parameter " + sc.Name + " is empty: keys are scoped to it"}
		}
	default: // principal
		return principalOf(spec, route.Principal)
	}
	if err := idemtype.CheckScope(v); err != nil || !spec.Scope.Principal {
		return v, err
	}
	p, err := principalOf(spec, route.Principal)
	if err != nil {
		return "", err
	}
	// Each part escaped, so that no two pairs make the same value.
	both := url.PathEscape(p) + "/" + url.PathEscape(v)
	return both, idemtype.CheckScope(both)
}

// placement resolves the value spec's operation places its record by.
func placement(r *http.Request, body []byte, o *Options, spec *Spec, route Route) (string, error) {
	pl := spec.Placement
	var v string
	switch pl.Kind {
	case idemtype.PlacementHeader:
		v = r.Header.Get(pl.Name)
	case idemtype.PlacementPath:
		if route.PathParams != nil {
			v = route.PathParams()[pl.Name]
		}
	case idemtype.PlacementBody:
		return idemhttp.BodyPlacement(body, pl.Name)
	case idemtype.PlacementPrincipal:
		if o.Placement == nil {
			return "", errors.New("idem: operation " + spec.Operation.ID + " is placed by the principal but the runtime's Placement is nil")
		}
		p, err := principalOf(spec, route.Principal)
		if err != nil {
			return "", err
		}
		if v, err = o.Placement(p); err != nil {
			return "", err
		}
	}
	if v == "" {
		return "", &idemtype.Error{Kind: idemtype.KindInvalidRequest, Detail: "the request names no placement (" + pl.String() + "): its records are placed by it"}
	}
	return v, nil
}

// naturalKey is the digest of the values spec's natural key names, or nil
// when the request lacks one of them (an optional member left out): such
// a request names no intent to reconcile.
func naturalKey(body []byte, spec *Spec, route Route) []byte {
	values := make([]string, len(spec.NaturalKey))
	for i, part := range spec.NaturalKey {
		switch part.Kind {
		case idemtype.PlacementBody:
			v, err := idemhttp.BodyPlacement(body, part.Name)
			if err != nil {
				return nil
			}
			values[i] = v
		case idemtype.PlacementPath:
			if route.PathParams != nil {
				values[i] = route.PathParams()[part.Name]
			}
		}
		if values[i] == "" {
			return nil
		}
	}
	return idemtype.NaturalKeyDigest(spec.Operation.ID, values)
}

// principalOf resolves the caller a principal scope names.
func principalOf(spec *Spec, principal func() (string, error)) (string, error) {
	if principal == nil {
		return "", errors.New("idem: operation " + spec.Operation.ID + " is scoped to the principal but the runtime's Principal is nil")
	}
	p, err := principal()
	if err != nil {
		return "", err
	}
	if p == "" {
		return "", &idemtype.Error{Kind: idemtype.KindMissingScope, Detail: "authenticate: keys are scoped to the caller"}
	}
	return p, idemtype.CheckScope(p)
}

// Refuse answers a refusal of Prepare: it observes it and writes the
// problem response. Call.Refuse does the same with the headers every
// answer to the call carries (the request id).
func Refuse(ctx context.Context, eng *idem.Engine, w http.ResponseWriter, spec *Spec, perr *idemtype.Error) error {
	eng.ObserveContext(ctx, idem.Event{Kind: idem.EventBadRequest, Operation: spec.Operation.ID})
	return WriteResponse(w, eng.Contract().Refusal(perr), false)
}

// Refuse answers perr, a refusal of the Prepare that returned c, as the
// package's Refuse does, with the headers every answer to c carries.
func (c *Call) Refuse(ctx context.Context, eng *idem.Engine, w http.ResponseWriter, perr *idemtype.Error) error {
	c.SetHeaders(w.Header())
	return Refuse(ctx, eng, w, c.Spec, perr)
}

// Execute runs the phases of the call in ctx's request for typed request
// payload (stored for background completion) on eng and returns the
// response to send: a fresh one, a replay, or a problem. A Release's
// cause is returned as the error, for the framework's error handling.
func Execute[S any](ctx context.Context, eng *idem.Engine, payload []byte, phases []idem.Phase[S]) (*idem.Response, error) {
	return execute(ctx, eng, func(call *Call) (*idem.Response, error) {
		return idem.RunWithoutKey(ctx, eng, call.Spec.Operation, phases)
	}, func(call *Call) (*idem.Outcome, error) {
		req := call.Request
		req.Payload = payload
		return idem.Run(ctx, eng, call.Spec.Operation, req, phases)
	})
}

// ExecuteHandler is Execute for an operation served by its strict handler
// (x-idempotency handler: true), bound to the request as h: the engine
// runs it (idem.RunHandler), or, for a request without a key where the
// key is optional, it runs as a plain handler (idem.RunHandlerWithoutKey).
func ExecuteHandler(ctx context.Context, eng *idem.Engine, h idem.Handler) (*idem.Response, error) {
	return execute(ctx, eng, func(call *Call) (*idem.Response, error) {
		return idem.RunHandlerWithoutKey(ctx, eng, h)
	}, func(call *Call) (*idem.Outcome, error) {
		return idem.RunHandler(ctx, eng, call.Spec.Operation, call.Request, h)
	})
}

func execute(ctx context.Context, eng *idem.Engine, keyless func(*Call) (*idem.Response, error), run func(*Call) (*idem.Outcome, error)) (*idem.Response, error) {
	call := CallFrom(ctx)
	if call == nil {
		return nil, errors.New("idem: Execute called outside the idempotency middleware: the route's middleware did not run " +
			"(with gorilla/mux, serve under a prefix with RegisterOptions.BaseURL, not a PathPrefix sub-router)")
	}
	call.executed = true
	if call.Request.Key == "" {
		eng.Keyless(ctx, call.Spec.Operation, idemhttp.KeylessClient(call.userAgent))
		return keyless(call)
	}
	out, err := run(call)
	if err != nil {
		// Declared only here: errors.As makes them escape to the heap.
		var phase *idem.PhaseError
		if errors.As(err, &phase) {
			// The service's error handler gets the error as the phase
			// returned it, as it would without idemgen.
			call.Resumed, call.FailedPhase, err = phase.Resumed, phase.Phase, phase.Err
		}
		var perr *idemtype.Error
		if errors.As(err, &perr) {
			call.problem = perr
			return eng.Contract().Refusal(perr), nil
		}
		if cause := idem.Released(err); cause != nil {
			return nil, cause
		}
		return nil, err
	}
	call.Replayed, call.Resumed, call.FailedPhase = out.Replayed, out.Resumed, out.FailedPhase
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
	return writeResponse(w, r, replayed, nil)
}

// writeResponse is WriteResponse for call (nil: none): a replay carries
// the call's request id, and the stored one as the original request's.
func writeResponse(w http.ResponseWriter, r *idem.Response, replayed bool, call *Call) error {
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
		call.replayHeaders(h)
	}
	w.WriteHeader(r.Status)
	_, err := w.Write(r.Body)
	return err
}

// Writer is a strict-server response object for any generated response
// interface: generated code wraps it so its Visit method writes the
// engine's response, replay header included.
//
// A request whose Prefer: wait=N shortened how long it waits for an
// execution in flight (idem.PreferenceApplied) is answered with
// Preference-Applied: wait=N (RFC 7240).
func Writer(ctx context.Context, r *idem.Response) func(http.ResponseWriter) error {
	replayed, applied := false, ""
	call := CallFrom(ctx)
	if call != nil {
		replayed = call.Replayed
		if call.Request.WaitSent && idem.PreferenceApplied(call.Spec.Operation, call.Request) {
			applied = idemhttp.PreferenceAppliedWait(call.Request.Wait)
		}
	}
	return func(w http.ResponseWriter) error {
		if applied != "" {
			w.Header().Set(PreferenceAppliedHeader, applied)
		}
		return writeResponse(w, r, replayed, call)
	}
}

// PreferenceAppliedHeader says which of a request's preferences (its
// Prefer header) the answer honoured (RFC 7240).
const PreferenceAppliedHeader = "Preference-Applied"

// LogRequest writes the one line an idempotent request gets, through
// logger (nil: slog.Default(), for failures and refusals only): the request, the status sent, the key and whether it was
// replayed or resumed, and the error the handler returned.
func LogRequest(logger *slog.Logger, r *http.Request, call *Call, status int, err error) {
	logRequest(logger, r, call, status, err, nil)
}

// LogRefusal is LogRequest for a request the protocol refused with perr:
// the line also says which refusal it was (refusal: the problem's kind),
// and a key the rule refused is logged as it was sent, quoted with Go's
// escapes and cut to its first invalidKeyShown bytes (invalid_key), never
// in full nor as "".
func LogRefusal(logger *slog.Logger, r *http.Request, call *Call, perr *idemtype.Error) {
	logRequest(logger, r, call, perr.Status(), nil, perr)
}

// invalidKeyShown is how much of a refused key a log line shows.
const invalidKeyShown = 64

func logRequest(logger *slog.Logger, r *http.Request, call *Call, status int, err error, perr *idemtype.Error) {
	if logger == nil {
		// Told nothing: the requests a team must hear of (a failure, a
		// refusal) through slog.Default(), not every answered one (an
		// access log, which costs a line per request, is asked for).
		if status < 400 && err == nil && perr == nil {
			return
		}
		logger = slog.Default()
	}
	attrs := []any{"method", r.Method, "path", r.URL.Path, "status", status}
	invalid := perr != nil && perr.Kind == idemtype.KindInvalidKey
	if call != nil {
		key := call.Request.Key
		if invalid {
			key = ""
		}
		attrs = append(attrs, "operation", call.Spec.Operation.ID, "idempotency_key", key,
			"replayed", call.Replayed, "resumed", call.Resumed)
		if call.Request.Scope != "" {
			// Which tenant, never its text: a principal is often a
			// credential (Engine.LogScope).
			attrs = append(attrs, "scope", call.logScope(call.Request.Scope))
		}
		if call.RequestID != "" {
			attrs = append(attrs, "request_id", call.RequestID)
		}
		if call.FailedPhase != "" {
			attrs = append(attrs, "failed_phase", call.FailedPhase)
		}
	}
	if perr != nil {
		attrs = append(attrs, "refusal", string(perr.Kind))
	}
	if invalid && call != nil && call.Spec.Key.Pointer == "" {
		name := call.Spec.Key.Header
		if name == "" {
			name = idemtype.DefaultKeyHeader
		}
		sent := strings.Join(r.Header.Values(name), ", ")
		shown := strconv.Quote(sent[:min(len(sent), invalidKeyShown)])
		if len(sent) > invalidKeyShown {
			shown += "..."
		}
		attrs = append(attrs, "invalid_key", shown, "invalid_key_bytes", len(sent))
	}
	if err != nil {
		attrs = append(attrs, "err", err.Error())
	}
	// With the request's context: a handler that reads it (idemotel's
	// LogHandler) adds the request's trace to the line.
	logger.InfoContext(r.Context(), "idempotent request", attrs...)
}

// DefaultCompleterInterval is how often the background completer that a
// generated Register starts looks for abandoned executions.
const DefaultCompleterInterval = 10 * time.Second

// StartCompleter starts eng's background completer (Engine.RunCompleter)
// in a goroutine of its own, every interval (0: DefaultCompleterInterval)
// until ctx (nil: the life of the process) is done; a negative interval
// starts none. The generated Register calls it, through the adapter's
// Runtime, when the spec has an operation with complete: background.
func StartCompleter(ctx context.Context, eng *idem.Engine, interval time.Duration) {
	switch {
	case interval < 0:
		return
	case interval == 0:
		interval = DefaultCompleterInterval
	}
	if ctx == nil {
		ctx = context.Background()
	}
	go eng.RunCompleter(ctx, interval)
}

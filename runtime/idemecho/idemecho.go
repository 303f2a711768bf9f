// Package idemecho connects the idempotency engine to echo, as a thin
// adapter of runtime/idemstd, the protocol's framework-free core. Generated
// code installs Middleware on each idempotent route and calls Execute from
// the operation's strict handler; users rarely call either directly.
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
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemsig"
	"github.com/idemgen/idemgen/runtime/idemstd"
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
	// Placement maps the principal to the value an operation with
	// placement: principal places its records by (its tenant's or
	// account's id, as the service's tables are distributed): the
	// principal itself is often a credential, and a record keeps its
	// placement in clear. Required when an operation uses it.
	Placement func(principal string) (string, error)
	// Senders verifies the senders of operations scoped "sender:<name>",
	// by name: the verifier runs over the raw body before anything is
	// claimed, a refusal is 401 invalid-signature, and the sender it
	// returns scopes the key. Required for each name an operation uses.
	Senders map[string]idemsig.Verifier
	// MaxBodyBytes limits request bodies read for fingerprinting (default
	// 1 MiB); larger bodies are answered 413.
	MaxBodyBytes int64
	// Logger gets one line per idempotent request with the key and
	// whether it was replayed. Nil: slog.Default() gets the lines of
	// failures and refusals (status 400 and above); a logger on
	// slog.DiscardHandler, none.
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
const DefaultMaxBodyBytes = idemstd.DefaultMaxBodyBytes

// DefaultCompleterInterval is Runtime.CompleterInterval's default.
const DefaultCompleterInterval = idemstd.DefaultCompleterInterval

// StartCompleter starts the engine's background completer
// (Engine.RunCompleter) in a goroutine of its own, every
// rt.CompleterInterval until rt.Context is done, unless CompleterInterval
// is negative. The generated Register calls it when the spec has an
// operation with complete: background, so that such an operation is
// finished without a retry and without code of the service's.
func (rt *Runtime) StartCompleter() {
	idemstd.StartCompleter(rt.Context, rt.Engine, rt.CompleterInterval)
}

// Spec is one idempotent operation as the generator describes it.
type Spec = idemstd.Spec

// Call is an idempotent request in flight. The middleware puts it in the
// request's context; Execute fills in the outcome.
type Call = idemstd.Call

// CallFrom returns the idempotent call of ctx, or nil.
func CallFrom(ctx context.Context) *Call { return idemstd.CallFrom(ctx) }

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
			route := idemstd.Route{PathParams: func() map[string]string { return pathParams(c) }}
			if rt.Principal != nil {
				route.Principal = func() (string, error) { return rt.Principal(c) }
			}
			opts := idemstd.Options{Senders: rt.Senders, MaxBodyBytes: rt.MaxBodyBytes, Headers: rt.Engine.Contract().Headers, LogScope: rt.Engine.LogScope, Placement: rt.Placement}
			call, err := idemstd.Prepare(c.Request(), &opts, spec, route)
			if err != nil {
				// Every answer carries the request's id, a failure's too.
				call.SetHeaders(c.Response().Header())
				var perr *idemtype.Error
				var be *idemstd.BodyError
				switch {
				case errors.As(err, &perr):
					idemstd.LogRefusal(rt.Logger, c.Request(), call, perr)
					if err := call.Refuse(c.Request().Context(), rt.Engine, c.Response(), perr); err != nil {
						return err
					}
					return refusal(perr)
				case errors.As(err, &be):
					return echo.NewHTTPError(be.Status, be.Err.Error())
				}
				return err
			}
			c.SetRequest(call.Bind(c.Request()))
			// A binder's 400 becomes the key's stored answer when there is
			// one (idemstd.Guard).
			res := c.Response()
			g := call.Guard(c.Request().Context(), res.Writer, rt.Engine)
			res.Writer = g
			err = next(c)
			var he *echo.HTTPError
			if err != nil && call.Unbound() && !errors.As(err, &he) {
				// The strict server's binder failed (a form field that does
				// not parse): the client's request, not the service.
				err = echo.NewHTTPError(http.StatusBadRequest, "the request does not bind: "+err.Error()).SetInternal(err)
			}
			if err != nil {
				// Render the error now, so the log line has the status sent.
				c.Error(err)
			}
			res.Writer = g.ResponseWriter
			if g.Replaced() {
				// The stored answer went out in place of the binder's 400:
				// that error is answered, and what the chain sees is the
				// replay.
				res.Status, err = g.Status(), nil
			}
			idemstd.LogRequest(rt.Logger, c.Request(), call, res.Status, err)
			if perr := call.Problem(); err == nil && perr != nil {
				return refusal(perr)
			}
			return err
		}
	}
}

// Bound tells the idempotency middleware of ctx's request that the strict
// server bound it (see idemstd.Call.MarkBound); generated glue calls it from
// its outermost strict middleware. An error the handler returns before it
// is the binder's, answered 400.
func Bound(ctx context.Context) {
	if call := idemstd.CallFrom(ctx); call != nil {
		call.MarkBound()
	}
}

// refusal is the error a protocol refusal returns up echo's chain, once its
// problem was written.
func refusal(perr *idemtype.Error) error {
	return echo.NewHTTPError(perr.Status(), perr.Error()).SetInternal(perr)
}

// pathParams are c's path parameters by name.
func pathParams(c echo.Context) map[string]string {
	names, values := c.ParamNames(), c.ParamValues()
	if len(names) == 0 {
		return nil
	}
	params := make(map[string]string, len(names))
	for i, name := range names {
		if i < len(values) {
			params[name] = values[i]
		}
	}
	return params
}

// Execute runs the phases of the call in ctx's request for typed request
// payload (stored for background completion) and returns the response to
// send: a fresh one, a replay, or a problem. A Release's cause is
// returned as the error, for echo's error handler (return an
// *echo.HTTPError from a phase, wrapped in idem.Release, to choose the
// status).
func Execute[S any](ctx context.Context, rt *Runtime, payload []byte, phases []idem.Phase[S]) (*idem.Response, error) {
	return idemstd.Execute(ctx, rt.Engine, payload, phases)
}

// ExecuteHandler is Execute for an operation served by its strict handler,
// bound to the request as h (idemstd.ExecuteHandler).
func ExecuteHandler(ctx context.Context, rt *Runtime, h idem.Handler) (*idem.Response, error) {
	return idemstd.ExecuteHandler(ctx, rt.Engine, h)
}

// Render runs a strict-server response visitor against a recorder and
// returns the exact response it wrote (idemstd.Render).
func Render(visit func(http.ResponseWriter) error) (*idem.Response, error) {
	return idemstd.Render(visit)
}

// WriteResponse writes a stored or fresh response; a replay carries
// Idempotent-Replayed: true (idemstd.WriteResponse).
func WriteResponse(w http.ResponseWriter, r *idem.Response, replayed bool) error {
	return idemstd.WriteResponse(w, r, replayed)
}

// Writer is a strict-server response object for any generated response
// interface (idemstd.Writer).
func Writer(ctx context.Context, r *idem.Response) func(http.ResponseWriter) error {
	return idemstd.Writer(ctx, r)
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

// Package idemgin connects the idempotency engine to gin, as a thin
// adapter of runtime/idemstd, the protocol's framework-free core. It is a
// module of its own, so that services of the other frameworks never
// download gin. Generated code installs the middleware on each idempotent
// route (Router) and calls Execute from the operation's strict handler;
// users rarely call either directly.
//
// The middleware keeps gin's conventions: a protocol refusal is written as
// problem+json and added to the context's errors (c.Error) as the
// *idemtype.Error, and the chain is aborted; an error of the service's (a
// failing Principal) is c.AbortWithError with status 500.
package idemgin

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemsig"
	"github.com/idemgen/idemgen/runtime/idemstd"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Spec is one idempotent operation as the generator describes it.
type Spec = idemstd.Spec

// Call is an idempotent request in flight.
type Call = idemstd.Call

// Runtime is what every idempotent route of a gin service shares.
type Runtime struct {
	Engine *idem.Engine
	// Principal resolves scope "principal": the account or tenant a
	// request's key is scoped to. An error aborts the request with 500; an
	// empty principal is answered 401. Required when an operation uses it.
	Principal func(c *gin.Context) (string, error)
	// Placement maps the principal to the value an operation with
	// placement: principal places its records by (its tenant's or
	// account's id, as the service's tables are distributed): the
	// principal itself is often a credential, and a record keeps its
	// placement in clear. Required when an operation uses it.
	Placement func(principal string) (string, error)
	// Senders verifies the senders of operations scoped "sender:<name>",
	// by name (see idemstd.Runtime.Senders).
	Senders map[string]idemsig.Verifier
	// MaxBodyBytes limits request bodies read for fingerprinting (default
	// idemstd.DefaultMaxBodyBytes); larger bodies are answered 413.
	MaxBodyBytes int64
	// Logger gets one line per idempotent request. Nil: slog.Default()
	// gets the lines of failures and refusals (status 400 and above); a
	// logger on slog.DiscardHandler, none.
	Logger *slog.Logger
	// Context bounds the background completer the generated Register
	// starts (see idemstd.StartCompleter). Default: the life of the process.
	Context context.Context
	// CompleterInterval is how often that completer runs (default
	// idemstd.DefaultCompleterInterval); negative starts none.
	CompleterInterval time.Duration
}

// StartCompleter starts the engine's background completer for rt.
func (rt *Runtime) StartCompleter() {
	idemstd.StartCompleter(rt.Context, rt.Engine, rt.CompleterInterval)
}

// CallFrom returns the idempotent call of ctx, which may be a *gin.Context
// (as strict handlers get it), or nil.
func CallFrom(ctx context.Context) *Call { return idemstd.CallFrom(requestContext(ctx)) }

// requestContext is the request's context of a *gin.Context, whose own
// Value reaches it only with gin's ContextWithFallback.
func requestContext(ctx context.Context) context.Context {
	if c, ok := ctx.(*gin.Context); ok && c.Request != nil {
		return c.Request.Context()
	}
	return ctx
}

// Middleware returns the gin middleware of one idempotent route.
func Middleware(rt *Runtime, spec *Spec) gin.HandlerFunc {
	opts := idemstd.Options{Senders: rt.Senders, MaxBodyBytes: rt.MaxBodyBytes, Headers: rt.Engine.Contract().Headers, LogScope: rt.Engine.LogScope, Placement: rt.Placement}
	return func(c *gin.Context) {
		route := idemstd.Route{PathParams: func() map[string]string {
			if len(c.Params) == 0 {
				return nil
			}
			params := make(map[string]string, len(c.Params))
			for _, p := range c.Params {
				params[p.Key] = p.Value
			}
			return params
		}}
		if rt.Principal != nil {
			route.Principal = func() (string, error) { return rt.Principal(c) }
		}
		call, err := idemstd.Prepare(c.Request, &opts, spec, route)
		if err != nil {
			// Every answer carries the request's id, a failure's too.
			call.SetHeaders(c.Writer.Header())
			var perr *idemtype.Error
			var be *idemstd.BodyError
			switch {
			case errors.As(err, &perr):
				idemstd.LogRefusal(rt.Logger, c.Request, call, perr)
				if err := call.Refuse(c.Request.Context(), rt.Engine, c.Writer, perr); err != nil {
					c.Error(err)
				}
				c.Error(perr)
				c.Abort()
			case errors.As(err, &be):
				c.String(be.Status, be.Error())
				c.Error(err)
				c.Abort()
			default:
				c.AbortWithError(http.StatusInternalServerError, err)
			}
			return
		}
		c.Request = call.Bind(c.Request)
		// A binder's 400 becomes the key's stored answer when there is one
		// (idemstd.Guard).
		w := c.Writer
		g := call.Guard(c.Request.Context(), w, rt.Engine)
		c.Writer = &guardWriter{ResponseWriter: w, g: g}
		c.Next()
		c.Writer = w
		if g.Replaced() {
			// The stored answer went out in place of the binder's 400:
			// its error is answered, and no outer middleware must write
			// it after the replay.
			c.Errors = c.Errors[:0]
		}
		var last error // a nil *gin.Error would be an error that is not nil
		if e := c.Errors.Last(); e != nil {
			last = e
		}
		idemstd.LogRequest(rt.Logger, c.Request, call, c.Writer.Status(), last)
		if perr := call.Problem(); perr != nil {
			c.Error(perr)
		}
	}
}

// guardWriter is gin's writer with idemstd.Guard in front of its writes.
type guardWriter struct {
	gin.ResponseWriter
	g *idemstd.Guard
}

func (w *guardWriter) WriteHeader(status int)            { w.g.WriteHeader(status) }
func (w *guardWriter) Write(b []byte) (int, error)       { return w.g.Write(b) }
func (w *guardWriter) WriteString(s string) (int, error) { return w.g.Write([]byte(s)) }

// Execute runs the phases of the call in ctx's request (ctx may be the
// *gin.Context) for typed request payload and returns the response to
// send: a fresh one, a replay, or a problem (see idemstd.Execute).
func Execute[S any](ctx context.Context, rt *Runtime, payload []byte, phases []idem.Phase[S]) (*idem.Response, error) {
	return idemstd.Execute(requestContext(ctx), rt.Engine, payload, phases)
}

// ExecuteHandler is Execute for an operation served by its strict handler,
// bound to the request as h (idemstd.ExecuteHandler); ctx may be the
// *gin.Context.
func ExecuteHandler(ctx context.Context, rt *Runtime, h idem.Handler) (*idem.Response, error) {
	return idemstd.ExecuteHandler(requestContext(ctx), rt.Engine, h)
}

// Render runs a strict-server response visitor against a recorder and
// returns the exact response it wrote (idemstd.Render).
func Render(visit func(http.ResponseWriter) error) (*idem.Response, error) {
	return idemstd.Render(visit)
}

// Writer is a strict-server response object for any generated response
// interface (idemstd.Writer); ctx may be the *gin.Context.
func Writer(ctx context.Context, r *idem.Response) func(http.ResponseWriter) error {
	return idemstd.Writer(requestContext(ctx), r)
}

// Router returns router with the idempotency middleware of each idempotent
// route put in front of the handlers registered for it: mws by "METHOD
// path" as the route is registered (gin's syntax, base URL included).
// oapi-codegen's own Middlewares run inside a route's handler, one after
// another, and could not see its end; generated Register functions
// register through Router instead.
func Router(router gin.IRouter, mws map[string]gin.HandlerFunc) gin.IRouter {
	return &idemRouter{IRouter: router, mws: mws}
}

type idemRouter struct {
	gin.IRouter
	mws map[string]gin.HandlerFunc
}

func (r *idemRouter) with(method, path string, h []gin.HandlerFunc) []gin.HandlerFunc {
	if m := r.mws[method+" "+path]; m != nil {
		return append([]gin.HandlerFunc{m}, h...)
	}
	return h
}

func (r *idemRouter) Handle(method, path string, h ...gin.HandlerFunc) gin.IRoutes {
	return r.IRouter.Handle(method, path, r.with(method, path, h)...)
}
func (r *idemRouter) GET(path string, h ...gin.HandlerFunc) gin.IRoutes {
	return r.Handle(http.MethodGet, path, h...)
}
func (r *idemRouter) POST(path string, h ...gin.HandlerFunc) gin.IRoutes {
	return r.Handle(http.MethodPost, path, h...)
}
func (r *idemRouter) PUT(path string, h ...gin.HandlerFunc) gin.IRoutes {
	return r.Handle(http.MethodPut, path, h...)
}
func (r *idemRouter) PATCH(path string, h ...gin.HandlerFunc) gin.IRoutes {
	return r.Handle(http.MethodPatch, path, h...)
}
func (r *idemRouter) DELETE(path string, h ...gin.HandlerFunc) gin.IRoutes {
	return r.Handle(http.MethodDelete, path, h...)
}
func (r *idemRouter) HEAD(path string, h ...gin.HandlerFunc) gin.IRoutes {
	return r.Handle(http.MethodHead, path, h...)
}
func (r *idemRouter) OPTIONS(path string, h ...gin.HandlerFunc) gin.IRoutes {
	return r.Handle(http.MethodOptions, path, h...)
}

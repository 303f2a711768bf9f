package idemstd

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemsig"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Runtime is what every idempotent route of a net/http service shares.
type Runtime struct {
	Engine *idem.Engine
	// Principal resolves scope "principal": the account or tenant a
	// request's key is scoped to. An error goes to ErrorHandler; an empty
	// principal is answered 401. Required when an operation uses it.
	Principal func(r *http.Request) (string, error)
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
	// DefaultMaxBodyBytes); larger bodies are answered 413.
	MaxBodyBytes int64
	// PathValue reads a path parameter of the route (default
	// r.PathValue, which net/http's ServeMux and chi set). With
	// gorilla/mux: func(r *http.Request, name string) string { return
	// mux.Vars(r)[name] }.
	PathValue func(r *http.Request, name string) string
	// ErrorHandler answers an error that is not a protocol refusal: a body
	// that does not read (400) or is too large (413, a *BodyError), or a
	// failing Principal or verifier. Default: http.Error, with the
	// BodyError's status and text, or a plain 500 whose cause goes to
	// Logger only.
	ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)
	// Logger gets one line per idempotent request with the key and
	// whether it was replayed. Nil: slog.Default() gets the lines of
	// failures and refusals (status 400 and above); a logger on
	// slog.DiscardHandler, none.
	Logger *slog.Logger
	// Context bounds the background work the generated Register starts
	// (see StartCompleter). Default: the life of the process.
	Context context.Context
	// CompleterInterval is how often that completer looks for abandoned
	// executions (default DefaultCompleterInterval). Negative: Register
	// starts none, and the service runs Engine.RunCompleter itself.
	CompleterInterval time.Duration
}

// StartCompleter starts the engine's background completer for rt (see the
// function StartCompleter).
func (rt *Runtime) StartCompleter() { StartCompleter(rt.Context, rt.Engine, rt.CompleterInterval) }

func (rt *Runtime) fail(w http.ResponseWriter, r *http.Request, err error) {
	if rt.ErrorHandler != nil {
		rt.ErrorHandler(w, r, err)
		return
	}
	var be *BodyError
	if errors.As(err, &be) {
		http.Error(w, be.Error(), be.Status)
		return
	}
	// The service's own failure (a Principal or verifier that failed): its
	// text stays in the log, as the frameworks' default handlers keep it.
	cmp.Or(rt.Logger, slog.Default()).ErrorContext(r.Context(), "idem: the idempotency middleware failed", "path", r.URL.Path, "err", err)
	http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
}

// Middleware returns the net/http middleware of one idempotent route, as
// func(http.Handler) http.Handler: a protocol refusal (a missing key, a
// reused one, a claim in flight) is answered as problem+json before next
// runs; otherwise next serves the request with the call in its context,
// for Execute.
func Middleware(rt *Runtime, spec *Spec) func(http.Handler) http.Handler {
	names := idemhttp.RouteParams(spec.Route)
	opts := &Options{Senders: rt.Senders, MaxBodyBytes: rt.MaxBodyBytes, Headers: rt.Engine.Contract().Headers, LogScope: rt.Engine.LogScope, Placement: rt.Placement}
	pathValue := rt.PathValue
	if pathValue == nil {
		pathValue = func(r *http.Request, name string) string { return r.PathValue(name) }
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			route := Route{PathParams: func() map[string]string {
				if len(names) == 0 {
					return nil
				}
				params := make(map[string]string, len(names))
				for _, n := range names {
					params[n] = pathValue(r, n)
				}
				return params
			}}
			if rt.Principal != nil {
				route.Principal = func() (string, error) { return rt.Principal(r) }
			}
			call, err := Prepare(r, opts, spec, route)
			if err != nil {
				// Every answer carries the request's id, a failure's too.
				call.SetHeaders(w.Header())
				var perr *idemtype.Error
				if !errors.As(err, &perr) {
					rt.fail(w, r, err)
					LogRequest(rt.Logger, r, call, statusOf(err), err)
					return
				}
				if err := call.Refuse(r.Context(), rt.Engine, w, perr); err != nil {
					rt.fail(w, r, err)
				}
				LogRefusal(rt.Logger, r, call, perr)
				return
			}
			r = call.Bind(r)
			g := call.Guard(r.Context(), w, rt.Engine)
			next.ServeHTTP(g, r)
			status := g.Status()
			if status == 0 {
				status = http.StatusOK // what net/http sends for a handler that wrote nothing
			}
			LogRequest(rt.Logger, r, call, status, nil)
		})
	}
}

// statusOf is the status rt.fail answers err with by default.
func statusOf(err error) int {
	var be *BodyError
	if errors.As(err, &be) {
		return be.Status
	}
	return http.StatusInternalServerError
}

// Routes returns one middleware for every idempotent operation of a router
// whose middlewares wrap each route's handler without being told its
// operation (oapi-codegen's Middlewares option): it finds the request's
// operation in specs by routeName, the route as "METHOD pattern" the way
// the router names it (r.Pattern for net/http's ServeMux), and runs that
// operation's Middleware; other routes go straight to their handler.
// Generated Register functions call it.
func Routes(rt *Runtime, routeName func(*http.Request) string, specs map[string]*Spec) func(http.Handler) http.Handler {
	byRoute := make(map[string]func(http.Handler) http.Handler, len(specs))
	for route, spec := range specs {
		byRoute[route] = Middleware(rt, spec)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if m := byRoute[routeName(r)]; m != nil {
				m(next).ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

package idem

import "context"

// ContextObserver is an Observer that also wants the context each event
// happened in: the request's (with its trace), or a phase's. The engine
// calls ObserveContext instead of Observe on an observer that implements it,
// so that spans can be annotated and logs written with slog's *Context
// methods carry the request's trace.
type ContextObserver interface {
	Observer
	ObserveContext(ctx context.Context, ev Event)
}

// StepKind names a step of an execution that a Tracer sees.
type StepKind string

// The steps the engine reports to a Tracer.
const (
	// StepRequest is one call of Run (or one record the background
	// completer finishes): the claim or replay, and the phases that run.
	StepRequest StepKind = "request"
	// StepClaim is the claim: the insert, or the read and decision on a
	// record that already holds the key (replay, 409, 422, takeover).
	StepClaim StepKind = "claim"
	// StepPhase is one phase, its commit included.
	StepPhase StepKind = "phase"
)

// Step is what begins when the engine calls Tracer.Start.
type Step struct {
	Kind      StepKind
	Operation string // the operationId
	Phase     string // for StepPhase: the phase name
	// Background is set for a request the completer runs, with no client
	// waiting for it.
	Background bool
}

// Tracer is told when a request, its claim and each of its phases begin.
// Start returns the context the step runs in (a phase's code gets it, so
// its own spans nest under the step's) and end, which the engine calls once
// when the step is over, with its error (nil on success). Events of the
// step reach a ContextObserver with that context. Implementations must be
// safe for concurrent use and must not block.
type Tracer interface {
	Start(ctx context.Context, step Step) (context.Context, func(err error))
}

func noEnd(error) {}

// start begins a step on the engine's tracer, if any.
func (e *Engine) start(ctx context.Context, s Step) (context.Context, func(error)) {
	if e.opts.Tracer == nil {
		return ctx, noEnd
	}
	return e.opts.Tracer.Start(ctx, s)
}

// observe reports ev to the observer, with ctx if it wants it.
func (e *Engine) observe(ctx context.Context, ev Event) {
	if co, ok := e.obs.(ContextObserver); ok {
		co.ObserveContext(ctx, ev)
		return
	}
	e.obs.Observe(ev)
}

// Observers returns an observer that passes every event to each of obs in
// turn, with its context to those that are ContextObservers (a Prometheus
// and an OpenTelemetry adapter side by side, say).
func Observers(obs ...Observer) ContextObserver { return multiObserver(obs) }

type multiObserver []Observer

func (m multiObserver) Observe(ev Event) { m.ObserveContext(context.Background(), ev) }

func (m multiObserver) ObserveContext(ctx context.Context, ev Event) {
	for _, o := range m {
		if co, ok := o.(ContextObserver); ok {
			co.ObserveContext(ctx, ev)
		} else {
			o.Observe(ev)
		}
	}
}

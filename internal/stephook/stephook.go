// Package stephook lets idemtest watch the steps of a handler the engine
// runs (idem.RunHandler): where each begins and ends, so that it can stop
// the execution there, as it stops a phase list's phases.
package stephook

import "context"

// Hooks are called by the engine around each step of a handler, with its
// index among the steps the handler took, and for the final transaction
// (index = the number of steps, name "handler").
type Hooks struct {
	// Start is called before a step runs (a foreign one with its key).
	Start func(i int, name, key string)
	// End is called after a step's function returned without error: a
	// local step's before its commit, a foreign step's before its result
	// is recorded; the final transaction's after the handler returned.
	End func(i int, name string)
	// Done is called after a step's function returned, whatever it
	// returned.
	Done func(i int, name string)
}

type key struct{}

// With returns ctx carrying h.
func With(ctx context.Context, h *Hooks) context.Context {
	return context.WithValue(ctx, key{}, h)
}

// From returns the hooks ctx carries, or nil.
func From(ctx context.Context) *Hooks {
	h, _ := ctx.Value(key{}).(*Hooks)
	return h
}

// OnStart calls h.Start if there is one.
func (h *Hooks) OnStart(i int, name, k string) {
	if h != nil && h.Start != nil {
		h.Start(i, name, k)
	}
}

// OnEnd calls h.End if there is one.
func (h *Hooks) OnEnd(i int, name string) {
	if h != nil && h.End != nil {
		h.End(i, name)
	}
}

// OnDone calls h.Done if there is one.
func (h *Hooks) OnDone(i int, name string) {
	if h != nil && h.Done != nil {
		h.Done(i, name)
	}
}

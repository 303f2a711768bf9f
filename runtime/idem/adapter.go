package idem

// The calls here are for adapters (runtime/idemecho, and what a service of
// another framework writes in its place), not for phase code or
// operators: what an adapter needs besides Run to answer HTTP requests the
// engine's way.

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ObserveContext reports an event that happened in ctx to the engine's
// observer. Adapters use it for the errors they detect before reaching the
// engine (missing or bad keys).
func (e *Engine) ObserveContext(ctx context.Context, ev Event) { e.observe(ctx, ev) }

// RunWithoutKey runs the phases once, unprotected, for a request that sent
// no key to an operation whose key is optional: local phases still commit
// atomically one by one, foreign phases get a fresh random key, and nothing
// is recorded or replayed.
func RunWithoutKey[S any](ctx context.Context, e *Engine, op *Operation, phases []Phase[S]) (*Response, error) {
	if err := checkPhases(phases); err != nil {
		return nil, err
	}
	var state S
	nonce := newToken()
	for _, p := range phases {
		if p.foreign() {
			if err := p.Foreign(ctx, deriveKeyOf(currentKeyDerivation, op.namespace(), "", string(nonce[:]), p.Name, nil, e.opts.DerivedKeyLength), &state); err != nil {
				if a := Answered(err); a != nil {
					return a, checkFinal(p.Name, a)
				}
				return nil, err
			}
			continue
		}
		var resp *Response
		err := e.withHeld(ctx, func(pc *pgxpool.Conn) error {
			return pgx.BeginFunc(ctx, pc, func(tx pgx.Tx) error {
				var err error
				if p.Final != nil {
					resp, err = p.Final(ctx, tx, &state)
					if a := Answered(err); a != nil {
						resp, err = a, checkFinal(p.Name, a)
					}
					return err
				}
				err = p.Local(ctx, tx, &state)
				if a := Answered(err); a != nil {
					resp = a
					return checkFinal(p.Name, a)
				}
				return err
			})
		})
		if err != nil {
			return nil, err
		}
		if resp != nil {
			return resp, nil
		}
	}
	return nil, errors.New("idem: the last phase returned no response")
}

// Replay returns the stored answer for req's key when its record is
// complete and was made by the same request (operation and fingerprint);
// nil when there is none to give (no record, one in progress, another
// request's, one past its retention). It claims nothing and runs nothing:
// it is what Run would replay, read on its own. An adapter asks it when a
// keyed request fails before it reaches Run (a body the framework's binder
// refuses, though its fingerprint matches a completed execution's), so that
// a completed key's answer never depends on the binder. A replay it returns
// is observed as one.
func (e *Engine) Replay(ctx context.Context, op *Operation, req KeyedRequest) (*Response, error) {
	p, err := e.policy(op)
	if err != nil {
		return nil, err
	}
	key := cacheKey{op.namespace(), req.Scope, req.Key, req.Placement}
	if ent := e.cache.get(key); ent != nil {
		if !sameRequest(op, ent.operation, ent.fingerprint, req.Fingerprint) {
			return nil, nil
		}
		if rendered(ent.resp) {
			return nil, nil // rendered by Run, which has the Render
		}
		e.replayed(ctx, op, p, ent.stored, ent.resp)
		return ent.resp, nil
	}
	var rec *record
	err = againIfStale(func() (err error) {
		id := recordID(key.ns, key.scope, key.key)
		rec, err = e.store.read(ctx, e.pool, id, e.store.placeOf(req.Placement, id))
		return err
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, e.storeFailed(ctx, op, "reading the record", err)
	case rec.state != stateCompleted || rec.pastRetention || !sameRequest(op, rec.operation, rec.fingerprint, req.Fingerprint):
		return nil, nil
	case !rec.bodyOmitted && rendered(rec.response()):
		// A compact answer (Policy.Render) is rendered by Run, which has
		// the operation's Render; the adapter answers as it would
		// without a record.
		return nil, nil
	}
	return e.replayCompleted(ctx, op, p, key, rec), nil
}

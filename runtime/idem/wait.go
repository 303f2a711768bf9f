package idem

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// A duplicate that finds its key held by an execution in flight waits for
// that execution's end, within its budget (waitBudget), and is then
// answered as a retry would be: the stored response, replayed; or, when
// the execution released the key or its owner died, by claiming or taking
// the key over itself. The waiting is done by a watcher, one per engine:
// while any request waits, it reads the state of every waited key in one
// query (Watch) every watchEvery, and at once when this engine ends an
// execution (kick). A waiting request holds no connection: it sleeps on a
// channel between the watcher's looks. A completed record is read once per
// engine and handed to all its waiters; a key that became free (released,
// or its owner's lease ran out) wakes one waiter per look, whose claim or
// takeover the others then wait on: a hundred duplicates do not stampede
// the key when it completes or is freed. docs/runtime.md, "Duplicates
// wait", says what a client sees.

// watchEvery is how often the watcher looks at the waited keys: at most 20
// queries a second per engine for all the committed keys its requests wait
// on; an answer within watchEvery (plus a query) of a commit made in
// another process. An execution this engine runs wakes its waiters at once.
const watchEvery = 50 * time.Millisecond

// uncommittedEvery is how often a key held by a claim not yet committed is
// looked at, by one waiter's claim (two round trips: the claim, and the
// rollback of its transaction when the key is still held): at most 20
// round trips a second per such key, and an answer within uncommittedEvery
// (plus a claim) of that commit in another process.
const uncommittedEvery = 2 * watchEvery

// watchTimeout bounds one look of the watcher.
const watchTimeout = 2 * time.Second

// DefaultWait is how long a duplicate waits for the execution in flight
// when its operation's policy says nothing (Policy.Wait): two default
// leases, so that a duplicate that arrives just after its execution's
// owner died is still answered, by the takeover that resumes it once the
// lease has run out, if that execution then takes no longer than a lease.
const DefaultWait = idemtype.DefaultWait

// MaxWait is the longest wait a policy may give: a minute, beyond the
// timeouts of most clients and proxies (nginx's proxy_read_timeout, load
// balancers' idle timeouts), past which nobody is left to answer.
const MaxWait = idemtype.MaxWait

// NoWait is a Policy.Wait that does not wait: a duplicate of an execution
// in flight is answered 409 with Retry-After at once.
const NoWait time.Duration = -1

// waitBudget is how long a request of policy p waits for the execution in
// flight that holds its key, and whether the client's preference (Prefer:
// wait=N) made it shorter than the policy's, which Preference-Applied then
// says.
func waitBudget(p Policy, req KeyedRequest) (budget time.Duration, applied bool) {
	budget = p.Wait
	switch {
	case budget < 0:
		budget = 0
	case budget == 0:
		budget = DefaultWait
	}
	if req.WaitSent && req.Wait < budget {
		return max(req.Wait, 0), true
	}
	return budget, false
}

// PreferenceApplied reports whether op's answer to req honours the
// client's Prefer: wait=N, which shortened how long it waits for an
// execution in flight: the adapter then sends Preference-Applied: wait=N
// (RFC 7240). A wait the policy's budget already bounds is not applied.
func PreferenceApplied(op *Operation, req KeyedRequest) bool {
	_, applied := waitBudget(op.Policy.withDefaults(), req)
	return applied
}

// The ways a wait ends, as EventWait's Cause says.
const (
	WaitAnswered    = "answered"     // the execution ended: the waiter replays, claims or takes over
	WaitBudgetSpent = "budget_spent" // 409 with Retry-After
	WaitClientGone  = "client_gone"  // the request's context ended
)

// watcher is an engine's waits, and the goroutine that looks at their keys
// while there are any.
type watcher struct {
	e       *Engine
	mu      sync.Mutex
	keys    map[[16]byte]*waited
	running bool
	kicked  chan struct{} // buffered: look now
}

// waited is a key's waiters, and what holds the key as they last saw it.
type waited struct {
	ws []*waiter
	// uncommitted: a claim not yet committed holds the key, which no query
	// but a claim of it can see. Watch skips the key: each look wakes one
	// waiter instead, whose claim is the look (a claim, a replay, or a
	// wait again), and which hands the others what it finds (settle).
	uncommitted bool
	placement   string // the record's (claim.placement)
}

// A waiter is one waiting request; the watcher sends it the completed
// record that held its key, or nil when it should look at the key itself.
type waiter struct {
	got chan *record
}

func newWatcher(e *Engine) *watcher {
	return &watcher{e: e, keys: map[[16]byte]*waited{}, kicked: make(chan struct{}, 1)}
}

// wait waits for the key of record id to change, until deadline or ctx's
// end: it returns the completed record that holds it now, or nil (the key
// changed otherwise: look again), or an error that ends the wait (ctx's,
// or errBudgetSpent). uncommitted says what holds the key: a claim not yet
// committed, or a committed record.
func (w *watcher) wait(ctx context.Context, id [16]byte, placement string, deadline time.Time, uncommitted bool) (*record, error) {
	me := &waiter{got: make(chan *record, 1)}
	w.mu.Lock()
	k := w.keys[id]
	if k == nil {
		k = &waited{placement: placement}
		w.keys[id] = k
	}
	k.ws, k.uncommitted = append(k.ws, me), uncommitted
	if !w.running {
		w.running = true
		go w.run()
	}
	w.mu.Unlock()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case rec := <-me.got:
		return rec, nil
	case <-t.C:
		if rec, ok := w.leave(id, me); ok {
			return rec, nil
		}
		return nil, errBudgetSpent
	case <-ctx.Done():
		if rec, ok := w.leave(id, me); ok {
			return rec, nil
		}
		return nil, context.Cause(ctx)
	}
}

// errBudgetSpent ends a wait whose budget ran out.
var errBudgetSpent = errors.New("idem: the wait for the execution in flight ran out")

// leave takes me off id's waiters. If the watcher had already answered
// it, that answer is returned instead (ok).
func (w *watcher) leave(id [16]byte, me *waiter) (rec *record, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case rec := <-me.got:
		return rec, true
	default:
	}
	if k := w.keys[id]; k != nil {
		for i, x := range k.ws {
			if x == me {
				k.ws = append(k.ws[:i:i], k.ws[i+1:]...)
				break
			}
		}
		if len(k.ws) == 0 {
			delete(w.keys, id)
		}
	}
	return nil, false
}

// settle hands rec, the completed record a waiter found holding id when it
// looked itself, to the key's other waiters.
func (w *watcher) settle(id [16]byte, rec *record) {
	w.mu.Lock()
	_, waited := w.keys[id]
	w.mu.Unlock()
	if waited {
		w.answer(id, rec, true)
	}
}

// kick has the watcher look now, if any request waits on record id: this
// engine ended the execution that held it.
func (w *watcher) kick(id [16]byte) {
	w.mu.Lock()
	_, waited := w.keys[id]
	w.mu.Unlock()
	if waited {
		select {
		case w.kicked <- struct{}{}:
		default:
		}
	}
}

// run looks at the waited keys every watchEvery (or when kicked) until no
// request waits.
func (w *watcher) run() {
	t := time.NewTimer(watchEvery)
	defer t.Stop()
	failing := false
	lastUncommitted := time.Now()
	for {
		kicked := false
		select {
		case <-t.C:
		case <-w.kicked:
			kicked = true
			if !t.Stop() {
				<-t.C
			}
		}
		w.mu.Lock()
		if len(w.keys) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		var ids, uncommitted [][16]byte
		lookUncommitted := kicked || time.Since(lastUncommitted) >= uncommittedEvery-watchEvery/2
		for id, k := range w.keys {
			switch {
			case !k.uncommitted:
				ids = append(ids, id)
			case lookUncommitted:
				uncommitted = append(uncommitted, id)
			}
		}
		if lookUncommitted {
			lastUncommitted = time.Now()
		}
		w.mu.Unlock()
		for _, id := range uncommitted {
			w.answer(id, nil, false)
		}
		var err error
		if len(ids) > 0 {
			err = w.look(ids)
		}
		switch {
		case err != nil && !failing:
			// Logged once per run of failures: the waiters keep waiting,
			// within their budgets, and the next look tries again.
			w.e.logStoreError(context.Background(), slog.LevelWarn, "", "watching keys in flight", err)
			failing = true
		case err == nil:
			failing = false
		}
		t.Reset(watchEvery)
	}
}

// look reads the state of ids, and answers their waiters: all of a key
// whose record completed, one of a key that is free or whose owner's lease
// ran out.
func (w *watcher) look(ids [][16]byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), watchTimeout)
	defer cancel()
	states, err := w.e.store.watch(ctx, ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		st, found := states[id]
		switch {
		case found && st == keyLive:
			continue
		case found && st == keyCompleted:
			w.mu.Lock()
			var placement string
			if k := w.keys[id]; k != nil {
				placement = k.placement
			}
			w.mu.Unlock()
			var rec *record
			err := againIfStale(func() (err error) {
				rec, err = w.e.store.read(ctx, w.e.pool, id, placement)
				return err
			})
			if errors.Is(err, pgx.ErrNoRows) {
				w.answer(id, nil, false) // deleted since: look again
				continue
			}
			if err != nil {
				return err
			}
			w.answer(id, rec, true)
		default: // free, or its owner's lease ran out
			w.answer(id, nil, false)
		}
	}
	return nil
}

// answer sends rec to id's waiters: all of them, or the first.
func (w *watcher) answer(id [16]byte, rec *record, all bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := w.keys[id]
	if k == nil {
		return
	}
	n := len(k.ws)
	if !all {
		n = min(n, 1)
	}
	for _, x := range k.ws[:n] {
		x.got <- rec
	}
	if n == len(k.ws) {
		delete(w.keys, id)
	} else {
		k.ws = k.ws[n:]
	}
}

// keyState is what Watch says of a waited key.
type keyState int

const (
	keyLive      keyState = iota + 1 // claimed, its owner's lease running
	keyCompleted                     // its response is stored
	keyExpired                       // claimed, its owner's lease ran out
)

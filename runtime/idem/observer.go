package idem

import "time"

// Event is one thing the engine observed. Observers turn events into metrics.
type Event struct {
	Kind      EventKind
	Operation string        // operationId
	Phase     string        // for EventPhase: the phase name
	Duration  time.Duration // for EventPhase: how long the phase ran, commit included
	Err       error         // for EventPhase and EventCompleterFailed: the error, if any
	Count     int64         // for EventPruned: records deleted; for EventStuck: records stuck
	// Age is, for EventReplay, how long ago the replayed answer was
	// stored; for EventIntentAge, how old the client says the request's
	// intent is.
	Age time.Duration
	// Retention is the operation's retention, for EventClaim, EventReplay
	// and EventIntentAge: what Age is measured against.
	Retention time.Duration
	// Status is, for EventReplay, the replayed answer's HTTP status (a 5xx
	// is a failure stored and replayed).
	Status int
	// Cause is, for EventWait, how the wait ended (WaitAnswered,
	// WaitBudgetSpent, WaitClientGone); for EventTakeover, why the record
	// could be taken over (TakeoverExpired, TakeoverCompleter).
	Cause string
}

// EventKind names an event.
type EventKind string

// The events the engine reports.
const (
	EventClaim        EventKind = "claim"         // a new key was claimed
	EventReplay       EventKind = "replay"        // a completed response was replayed
	EventInFlight     EventKind = "in_flight"     // 409: a live claim holds the key
	EventMismatch     EventKind = "mismatch"      // 422: same key, different fingerprint
	EventBadRequest   EventKind = "bad_request"   // 400/401: key, scope or body rejected
	EventRelease      EventKind = "release"       // a claim was deleted before any effect
	EventTakeover     EventKind = "takeover"      // an expired lease was taken over (see Cause)
	EventWait         EventKind = "wait"          // a duplicate waited for the execution in flight (see Duration, Cause)
	EventFenced       EventKind = "fenced"        // a stale owner's commit or refresh was rejected
	EventResume       EventKind = "resume"        // an execution continued from a recovery point
	EventComplete     EventKind = "complete"      // an execution stored its response
	EventAmbiguous    EventKind = "ambiguous"     // an execution failed after possible effects
	EventCompleterRun EventKind = "completer_run" // the background completer finished a record
	EventPhase        EventKind = "phase"         // a phase ran (see Duration)
	EventPruned       EventKind = "pruned"        // records deleted by the pruner (see Count)
	EventStuck        EventKind = "stuck"         // after a prune: half-done records past retention, waiting for an operator (see Count)
	// EventSameRequestNewKey follows an EventClaim whose request (operation,
	// scope and fingerprint) was claimed under another key within
	// Options.SameRequestWindow: the sign of a client that mints a key per
	// attempt instead of per intent.
	EventSameRequestNewKey EventKind = "same_request_new_key"
	// EventIntentAge: a request said how old its intent is (the
	// Idempotency-Intent-Age header; see Age and Retention). An intent
	// older than the retention may be retried after its record is gone.
	EventIntentAge EventKind = "intent_age"
	// EventCompleterFailed: the background completer took a record over
	// and its phases failed (see Err).
	EventCompleterFailed EventKind = "completer_failed"
	// EventPrimaryChanged follows an EventTakeover of a record last written
	// on another timeline than the primary's now: the execution crossed a
	// failover, where a standby that was not synchronous may have lost what
	// the old primary had acknowledged.
	EventPrimaryChanged EventKind = "primary_changed"
	// EventWeakKey: a request's key looks weak (idemtype.WeakKey; Cause
	// says why: timestamp, numeric, short): another intent's client is
	// likely to send it too, and the two would be taken for one.
	EventWeakKey EventKind = "weak_key"
	// EventNotStored: a response body exceeded the operation's
	// replay.maxBodyBytes and was not stored; its retries get 410
	// response-not-stored. An operation whose answers are large renders
	// its replays instead (replay.render).
	EventNotStored EventKind = "not_stored"
	// EventKeyless: a request without a key, to an operation whose key is
	// optional, ran unprotected (Cause: its client, idemhttp.KeylessClient). While
	// clients move to sending keys, the count per client says who is left;
	// at zero the key can be required.
	EventKeyless EventKind = "keyless"
)

// The causes of a takeover, as EventTakeover's Cause says.
const (
	// TakeoverExpired: a request found the owner's lease run out. An owner
	// renews its lease every third of it while it runs (docs/decisions.md):
	// a lease that ran out is an owner that died, or stopped for longer
	// than two renewals (a pause, a store it could not reach).
	TakeoverExpired = "lease_expired"
	// TakeoverCompleter: the background completer took over an abandoned
	// background record.
	TakeoverCompleter = "completer"
)

// Observer receives engine events. Implementations must be safe for
// concurrent use and must not block.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

type nopObserver struct{}

func (nopObserver) Observe(Event) {}

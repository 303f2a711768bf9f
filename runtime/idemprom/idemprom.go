// Package idemprom exports the idempotency engine's events as Prometheus
// metrics; runtime/idemotel exports the same ones to OpenTelemetry. The
// engine itself only knows the idem.Observer interface.
// NewReplicationCollector adds the store's replication lag, read from the
// primary at each scrape.
package idemprom

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Observer counts engine events and records phase latency, and the
// signals of the failures that look like success (docs/operations.md,
// "Alerts"): keys minted per attempt, retries near or past the retention,
// replayed failures. No metric has a key or a scope among its labels:
// their number of series is bounded by the operations and phases.
//
// Metrics:
//
//	idemgen_events_total{operation,event}            counter: claim, replay, in_flight (409),
//	                                                 mismatch (422), bad_request (400/401), release,
//	                                                 takeover, fenced, resume, complete, ambiguous,
//	                                                 completer_run, completer_failed, and
//	                                                 same_request_new_key (a claim whose request another
//	                                                 key claimed within the window: keys minted per attempt)
//	idemgen_pruned_total                             counter: records deleted by the pruner
//	idemgen_records_stuck                            gauge: half-done records past retention, waiting for an operator (set after each prune)
//	idemgen_phase_duration_seconds{operation,phase,outcome}  histogram; outcome is ok or error
//	idemgen_retention_seconds{operation}             gauge: the operation's retention (set by its claims and replays)
//	idemgen_replay_age_seconds{operation}            histogram: how long ago a replayed answer was stored
//	idemgen_replay_age_ratio{operation}              histogram: the same, as a fraction of the retention
//	idemgen_replayed_failures_total{operation}       counter: replays of a stored 5xx answer
//	idemgen_intent_age_seconds{operation}            histogram: the intent's age a request gave (Idempotency-Intent-Age)
//	idemgen_intent_past_retention_total{operation}   counter: requests whose intent is older than the retention
//	idemgen_wait_seconds{operation,outcome}          histogram: how long a duplicate waited for the execution in
//	                                                 flight; outcome is answered, budget_spent (409) or client_gone
//	idemgen_weak_keys_total{operation,reason}        counter: requests whose key looks weak: timestamp, numeric, short
//	idemgen_keyless_requests_total{operation,client} counter: requests without a key where it is optional, by client
//	idemgen_takeovers_total{operation,cause}         counter: takeovers by cause, lease_expired (the owner died or
//	                                                 stalled) or completer (the background completer's)
type Observer struct {
	events       *prometheus.CounterVec
	pruned       prometheus.Counter
	stuck        prometheus.Gauge
	phase        *prometheus.HistogramVec
	retention    *prometheus.GaugeVec
	replayAge    *prometheus.HistogramVec
	replayRatio  *prometheus.HistogramVec
	replayedFail *prometheus.CounterVec
	intentAge    *prometheus.HistogramVec
	intentPast   *prometheus.CounterVec
	wait         *prometheus.HistogramVec
	takeovers    *prometheus.CounterVec
	weakKeys     *prometheus.CounterVec
	keyless      *prometheus.CounterVec
	seen         sync.Map // operations whose counters are made
}

// rareEvents are the events whose counters are made, at zero, when an
// operation is first seen. An alert counts them with increase(), which
// cannot see a series' first samples: a counter that first appears at 1
// (three takeovers across a failover, scraped once) would increase by 0.
var rareEvents = []idem.EventKind{idem.EventInFlight, idem.EventMismatch, idem.EventRelease, idem.EventTakeover,
	idem.EventFenced, idem.EventResume, idem.EventAmbiguous, idem.EventCompleterRun, idem.EventCompleterFailed,
	idem.EventSameRequestNewKey, idem.EventPrimaryChanged, idem.EventReplay, idem.EventWait, idem.EventNotStored}

// AgeBuckets are the buckets of the age histograms, in seconds: from a
// second to a week, finer where retentions usually end (a day to three).
var AgeBuckets = []float64{1, 10, 60, 300, 1800, 3600, 4 * 3600, 12 * 3600, 20 * 3600, 24 * 3600, 36 * 3600, 48 * 3600, 65 * 3600, 72 * 3600, 7 * 24 * 3600}

// RatioBuckets are the buckets of idemgen_replay_age_ratio: an alert on
// replays past 0.9 of the retention reads the 0.9 bucket.
var RatioBuckets = []float64{0.1, 0.25, 0.5, 0.75, 0.9, 1}

// WaitBuckets are the buckets of idemgen_wait_seconds, in seconds: from
// the watcher's look (50 ms) to the longest wait (a minute).
var WaitBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// The wait outcomes and takeover causes whose series are made, at zero,
// when an operation is first seen, as rareEvents' are.
var (
	waitOutcomes   = []string{idem.WaitAnswered, idem.WaitBudgetSpent, idem.WaitClientGone}
	takeoverCauses = []string{idem.TakeoverExpired, idem.TakeoverCompleter}
)

// New registers the metrics with reg and returns the observer.
func New(reg prometheus.Registerer) (*Observer, error) {
	op := []string{"operation"}
	o := &Observer{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgen_events_total", Help: "Idempotency engine events by operation and kind.",
		}, []string{"operation", "event"}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemgen_pruned_total", Help: "Idempotency records deleted after their retention.",
		}),
		stuck: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemgen_records_stuck",
			Help: "Claimed records past their retention with no live owner: never pruned, they wait for a retry, the completer or 'idemgen resolve'.",
		}),
		phase: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "idemgen_phase_duration_seconds", Help: "Phase run time, commit included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
		}, []string{"operation", "phase", "outcome"}),
		retention: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "idemgen_retention_seconds", Help: "How long the operation's records are kept: a retry after it executes again.",
		}, op),
		replayAge: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "idemgen_replay_age_seconds", Help: "How long ago a replayed answer was stored.", Buckets: AgeBuckets,
		}, op),
		replayRatio: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "idemgen_replay_age_ratio", Help: "How long ago a replayed answer was stored, as a fraction of the operation's retention.", Buckets: RatioBuckets,
		}, op),
		replayedFail: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgen_replayed_failures_total", Help: "Replays of a stored 5xx answer: a failure every retry of the key gets.",
		}, op),
		intentAge: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "idemgen_intent_age_seconds", Help: "The age of its intent a request gave (Idempotency-Intent-Age).", Buckets: AgeBuckets,
		}, op),
		intentPast: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgen_intent_past_retention_total", Help: "Requests whose intent is older than the operation's retention: their record may be gone.",
		}, op),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "idemgen_wait_seconds", Help: "How long a duplicate waited for the execution in flight that held its key, by how the wait ended.", Buckets: WaitBuckets,
		}, []string{"operation", "outcome"}),
		takeovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgen_takeovers_total", Help: "Executions taken over from an owner whose lease ran out, by cause.",
		}, []string{"operation", "cause"}),
		weakKeys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgen_weak_keys_total", Help: "Requests whose key looks weak (another intent's client is likely to send it too), by why: timestamp, numeric, short.",
		}, []string{"operation", "reason"}),
	}
	o.keyless = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idemgen_keyless_requests_total", Help: "Requests without a key to an operation whose key is optional, run unprotected, by client (the User-Agent's product; at most idem.MaxKeylessClients, then other): at zero, the key can be required.",
	}, []string{"operation", "client"})
	for _, c := range []prometheus.Collector{o.events, o.pruned, o.stuck, o.phase, o.retention, o.replayAge, o.replayRatio, o.replayedFail, o.intentAge, o.intentPast, o.wait, o.takeovers, o.weakKeys, o.keyless} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Observe implements idem.Observer.
func (o *Observer) Observe(ev idem.Event) {
	if ev.Operation != "" {
		o.see(ev.Operation)
	}
	switch ev.Kind {
	case idem.EventPhase:
		outcome := "ok"
		if ev.Err != nil {
			outcome = "error"
		}
		o.phase.WithLabelValues(ev.Operation, ev.Phase, outcome).Observe(ev.Duration.Seconds())
	case idem.EventPruned:
		o.pruned.Add(float64(ev.Count))
	case idem.EventStuck:
		o.stuck.Set(float64(ev.Count))
	case idem.EventIntentAge:
		o.intentAge.WithLabelValues(ev.Operation).Observe(ev.Age.Seconds())
		if ev.Retention > 0 && ev.Age > ev.Retention {
			o.intentPast.WithLabelValues(ev.Operation).Inc()
		}
	case idem.EventReplay:
		o.events.WithLabelValues(ev.Operation, string(ev.Kind)).Inc()
		o.replayAge.WithLabelValues(ev.Operation).Observe(ev.Age.Seconds())
		if ev.Retention > 0 {
			o.retention.WithLabelValues(ev.Operation).Set(ev.Retention.Seconds())
			o.replayRatio.WithLabelValues(ev.Operation).Observe(ev.Age.Seconds() / ev.Retention.Seconds())
		}
		if ev.Status >= 500 {
			o.replayedFail.WithLabelValues(ev.Operation).Inc()
		}
	case idem.EventWait:
		o.events.WithLabelValues(ev.Operation, string(ev.Kind)).Inc()
		o.wait.WithLabelValues(ev.Operation, ev.Cause).Observe(ev.Duration.Seconds())
	case idem.EventTakeover:
		o.events.WithLabelValues(ev.Operation, string(ev.Kind)).Inc()
		o.takeovers.WithLabelValues(ev.Operation, ev.Cause).Inc()
	case idem.EventWeakKey:
		o.weakKeys.WithLabelValues(ev.Operation, ev.Cause).Inc()
	case idem.EventKeyless:
		o.keyless.WithLabelValues(ev.Operation, ev.Cause).Inc()
	case idem.EventClaim:
		o.events.WithLabelValues(ev.Operation, string(ev.Kind)).Inc()
		if ev.Retention > 0 {
			o.retention.WithLabelValues(ev.Operation).Set(ev.Retention.Seconds())
		}
	default:
		o.events.WithLabelValues(ev.Operation, string(ev.Kind)).Inc()
	}
}

// see makes the counters of an operation seen for the first time, at zero.
func (o *Observer) see(op string) {
	if _, ok := o.seen.Load(op); ok {
		return
	}
	if _, loaded := o.seen.LoadOrStore(op, true); loaded {
		return
	}
	for _, k := range rareEvents {
		o.events.WithLabelValues(op, string(k))
	}
	o.replayedFail.WithLabelValues(op)
	o.intentPast.WithLabelValues(op)
	for _, w := range waitOutcomes {
		o.wait.WithLabelValues(op, w)
	}
	for _, r := range idemtype.WeakKeyReasons {
		o.weakKeys.WithLabelValues(op, r)
	}
	for _, c := range takeoverCauses {
		o.takeovers.WithLabelValues(op, c)
	}
}

var _ idem.Observer = (*Observer)(nil)

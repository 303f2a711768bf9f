// Package idemprom exports the idempotency engine's events as Prometheus
// metrics; runtime/idemotel exports the same ones to OpenTelemetry. The
// engine itself only knows the idem.Observer interface.
package idemprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Observer counts engine events and records phase latency.
//
// Metrics:
//
//	idemgen_events_total{operation,event}            counter: claim, replay, in_flight (409),
//	                                                 mismatch (422), bad_request (400/401), release,
//	                                                 takeover, fenced, resume, complete, ambiguous,
//	                                                 completer_run
//	idemgen_pruned_total                             counter: records deleted by the pruner
//	idemgen_records_stuck                            gauge: half-done records past retention, waiting for an operator (set after each prune)
//	idemgen_phase_duration_seconds{operation,phase,outcome}  histogram; outcome is ok or error
type Observer struct {
	events *prometheus.CounterVec
	pruned prometheus.Counter
	stuck  prometheus.Gauge
	phase  *prometheus.HistogramVec
}

// New registers the metrics with reg and returns the observer.
func New(reg prometheus.Registerer) (*Observer, error) {
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
	}
	for _, c := range []prometheus.Collector{o.events, o.pruned, o.stuck, o.phase} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Observe implements idem.Observer.
func (o *Observer) Observe(ev idem.Event) {
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
	default:
		o.events.WithLabelValues(ev.Operation, string(ev.Kind)).Inc()
	}
}

var _ idem.Observer = (*Observer)(nil)

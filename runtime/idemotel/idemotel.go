// Package idemotel reports the idempotency engine to OpenTelemetry: a span
// per idempotent request, with child spans for its claim and each phase,
// and the Prometheus adapter's metrics (runtime/idemprom) as OTel
// instruments. It uses only the OTel API: the application chooses the SDK,
// the exporters and the sampling.
//
// Wire one Observer as both idem.Options.Observer and idem.Options.Tracer:
//
//	obs, err := idemotel.New(tracerProvider, meterProvider)
//	eng, err := idem.New(pool, idem.Options{Observer: obs, Tracer: obs})
//
// Spans:
//
//	idem.request {operation}       one call of idem.Run (or one record the completer finishes)
//	├── idem.claim                 the insert, or the decision on the record that holds the key
//	├── idem.phase {phase}         each phase that runs, its commit included
//	└── ...
//
// The request span carries idem.operation, idem.replayed, idem.resumed,
// idem.background and idem.outcome (see Outcome). Each engine event
// becomes a span event, idem.event.<kind> (idem.event.takeover,
// idem.event.fenced, ...), on the span of the step it happened in. A span whose step
// failed has status Error. Metrics (names as OTel instruments; a Prometheus
// exporter turns them into idemprom's names):
//
//	idemgen.events{operation,event}                 counter, as idemgen_events_total
//	idemgen.pruned                                  counter, as idemgen_pruned_total
//	idemgen.records.stuck                           gauge, as idemgen_records_stuck
//	idemgen.phase.duration{operation,phase,outcome} histogram (s), as idemgen_phase_duration_seconds
//	idemgen.retention{operation}                    gauge (s), as idemgen_retention_seconds
//	idemgen.replay.age{operation}                   histogram (s), as idemgen_replay_age_seconds
//	idemgen.replay.age_ratio{operation}             histogram, as idemgen_replay_age_ratio
//	idemgen.replayed_failures{operation}            counter, as idemgen_replayed_failures_total
//	idemgen.intent.age{operation}                   histogram (s), as idemgen_intent_age_seconds
//	idemgen.intent.past_retention{operation}        counter, as idemgen_intent_past_retention_total
//
// ObserveReplication adds the store's replication lag (idemgen.replication.*),
// read from the primary at each collection.
package idemotel

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgen/idemgen/runtime/idem"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/idemgen/idemgen/runtime/idemotel"

// Attribute keys of the spans.
const (
	AttrOperation  = attribute.Key("idem.operation")
	AttrPhase      = attribute.Key("idem.phase")
	AttrReplayed   = attribute.Key("idem.replayed")
	AttrResumed    = attribute.Key("idem.resumed")
	AttrBackground = attribute.Key("idem.background")
	AttrOutcome    = attribute.Key("idem.outcome")
)

// Outcome values of a request span's idem.outcome: what the request came to.
const (
	OutcomeCompleted  = "completed"   // the execution stored its response
	OutcomeReplayed   = "replayed"    // a stored response was replayed
	OutcomeInFlight   = "in_flight"   // 409: a live claim held the key
	OutcomeMismatch   = "mismatch"    // 422: the key was used for another request
	OutcomeReleased   = "released"    // failed before any effect; the key is free
	OutcomeFenced     = "fenced"      // another execution took the key over
	OutcomeAmbiguous  = "ambiguous"   // failed after possible effects; a retry resumes
	OutcomeFailed     = "failed"      // an error before any decision (the store unreachable, ...)
	OutcomeBadRequest = "bad_request" // refused before reaching the engine
)

// outcomes maps the events that decide a request's outcome. A later one
// wins: a fenced refresh then an ambiguous failure is ambiguous.
var outcomes = map[idem.EventKind]string{
	idem.EventComplete: OutcomeCompleted, idem.EventReplay: OutcomeReplayed, idem.EventInFlight: OutcomeInFlight,
	idem.EventMismatch: OutcomeMismatch, idem.EventRelease: OutcomeReleased, idem.EventFenced: OutcomeFenced,
	idem.EventAmbiguous: OutcomeAmbiguous, idem.EventBadRequest: OutcomeBadRequest,
}

// Observer is an idem.ContextObserver and an idem.Tracer.
type Observer struct {
	tracer       trace.Tracer
	events       metric.Int64Counter
	pruned       metric.Int64Counter
	stuck        metric.Int64Gauge
	phase        metric.Float64Histogram
	retention    metric.Float64Gauge
	replayAge    metric.Float64Histogram
	replayRatio  metric.Float64Histogram
	replayedFail metric.Int64Counter
	intentAge    metric.Float64Histogram
	intentPast   metric.Int64Counter
	wait         metric.Float64Histogram
	takeovers    metric.Int64Counter
	weakKeys     metric.Int64Counter
	keyless      metric.Int64Counter
	seen         sync.Map // operations whose counters are recorded
}

// ageBuckets and ratioBuckets are idemprom's AgeBuckets and RatioBuckets
// (this module does not depend on Prometheus's client).
var (
	ageBuckets   = []float64{1, 10, 60, 300, 1800, 3600, 4 * 3600, 12 * 3600, 20 * 3600, 24 * 3600, 36 * 3600, 48 * 3600, 65 * 3600, 72 * 3600, 7 * 24 * 3600}
	ratioBuckets = []float64{0.1, 0.25, 0.5, 0.75, 0.9, 1}
	waitBuckets  = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
)

// New returns an observer that makes spans with tp's tracer and records
// metrics with mp's meter.
func New(tp trace.TracerProvider, mp metric.MeterProvider) (*Observer, error) {
	m := mp.Meter(ScopeName)
	o := &Observer{tracer: tp.Tracer(ScopeName)}
	var err error
	if o.events, err = m.Int64Counter("idemgen.events",
		metric.WithDescription("Idempotency engine events by operation and kind.")); err != nil {
		return nil, err
	}
	if o.pruned, err = m.Int64Counter("idemgen.pruned",
		metric.WithDescription("Idempotency records deleted after their retention.")); err != nil {
		return nil, err
	}
	if o.stuck, err = m.Int64Gauge("idemgen.records.stuck",
		metric.WithDescription("Claimed records past their retention with no live owner: never pruned, they wait for a retry, the completer or 'idemgen resolve'.")); err != nil {
		return nil, err
	}
	if o.phase, err = m.Float64Histogram("idemgen.phase.duration", metric.WithUnit("s"),
		metric.WithDescription("Phase run time, commit included."),
		// idemprom's buckets: 0.5ms growing by 2.5x.
		metric.WithExplicitBucketBoundaries(0.0005, 0.00125, 0.003125, 0.0078125, 0.01953125, 0.048828125,
			0.1220703125, 0.30517578125, 0.762939453125, 1.9073486328125, 4.76837158203125, 11.920928955078125)); err != nil {
		return nil, err
	}
	if o.retention, err = m.Float64Gauge("idemgen.retention", metric.WithUnit("s"),
		metric.WithDescription("How long the operation's records are kept: a retry after it executes again.")); err != nil {
		return nil, err
	}
	if o.replayAge, err = m.Float64Histogram("idemgen.replay.age", metric.WithUnit("s"),
		metric.WithDescription("How long ago a replayed answer was stored."), metric.WithExplicitBucketBoundaries(ageBuckets...)); err != nil {
		return nil, err
	}
	if o.replayRatio, err = m.Float64Histogram("idemgen.replay.age_ratio",
		metric.WithDescription("How long ago a replayed answer was stored, as a fraction of the operation's retention."),
		metric.WithExplicitBucketBoundaries(ratioBuckets...)); err != nil {
		return nil, err
	}
	if o.replayedFail, err = m.Int64Counter("idemgen.replayed_failures",
		metric.WithDescription("Replays of a stored 5xx answer: a failure every retry of the key gets.")); err != nil {
		return nil, err
	}
	if o.intentAge, err = m.Float64Histogram("idemgen.intent.age", metric.WithUnit("s"),
		metric.WithDescription("The age of its intent a request gave (Idempotency-Intent-Age)."), metric.WithExplicitBucketBoundaries(ageBuckets...)); err != nil {
		return nil, err
	}
	if o.intentPast, err = m.Int64Counter("idemgen.intent.past_retention",
		metric.WithDescription("Requests whose intent is older than the operation's retention: their record may be gone.")); err != nil {
		return nil, err
	}
	if o.wait, err = m.Float64Histogram("idemgen.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a duplicate waited for the execution in flight that held its key, by how the wait ended (outcome)."),
		metric.WithExplicitBucketBoundaries(waitBuckets...)); err != nil {
		return nil, err
	}
	if o.takeovers, err = m.Int64Counter("idemgen.takeovers",
		metric.WithDescription("Executions taken over from an owner whose lease ran out, by cause.")); err != nil {
		return nil, err
	}
	if o.keyless, err = m.Int64Counter("idemgen.keyless_requests",
		metric.WithDescription("Requests without a key to an operation whose key is optional, run unprotected, by client (the User-Agent's product).")); err != nil {
		return nil, err
	}
	if o.weakKeys, err = m.Int64Counter("idemgen.weak_keys",
		metric.WithDescription("Requests whose key looks weak (another intent's client is likely to send it too), by reason: timestamp, numeric, short.")); err != nil {
		return nil, err
	}
	return o, nil
}

// request is what a request span learns from its events before it ends.
type request struct {
	mu                sync.Mutex
	replayed, resumed bool
	outcome           string
}

type requestKey struct{}

// Start implements idem.Tracer.
func (o *Observer) Start(ctx context.Context, s idem.Step) (context.Context, func(error)) {
	attrs := []attribute.KeyValue{AttrOperation.String(s.Operation)}
	var req *request
	name := "idem." + string(s.Kind)
	switch s.Kind {
	case idem.StepRequest:
		req = &request{}
		ctx = context.WithValue(ctx, requestKey{}, req)
	case idem.StepPhase:
		attrs = append(attrs, AttrPhase.String(s.Phase))
	}
	if s.Background {
		attrs = append(attrs, AttrBackground.Bool(true))
	}
	ctx, span := o.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
	return ctx, func(err error) {
		if req != nil {
			req.mu.Lock()
			outcome := req.outcome
			if outcome == "" {
				outcome = OutcomeFailed
				if err == nil {
					outcome = OutcomeCompleted
				}
			}
			span.SetAttributes(AttrReplayed.Bool(req.replayed), AttrResumed.Bool(req.resumed), AttrOutcome.String(outcome))
			req.mu.Unlock()
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// Observe implements idem.Observer, for events without a context.
func (o *Observer) Observe(ev idem.Event) { o.ObserveContext(context.Background(), ev) }

// ObserveContext implements idem.ContextObserver: it records the event's
// metrics and annotates the request it belongs to, if any.
func (o *Observer) ObserveContext(ctx context.Context, ev idem.Event) {
	if ev.Operation != "" {
		o.see(ctx, ev.Operation)
	}
	switch ev.Kind {
	case idem.EventPhase:
		outcome := "ok"
		if ev.Err != nil {
			outcome = "error"
		}
		o.phase.Record(ctx, ev.Duration.Seconds(), metric.WithAttributes(attribute.String("operation", ev.Operation),
			attribute.String("phase", ev.Phase), attribute.String("outcome", outcome)))
		return
	case idem.EventPruned:
		o.pruned.Add(ctx, ev.Count)
		return
	case idem.EventStuck:
		o.stuck.Record(ctx, ev.Count)
		return
	case idem.EventIntentAge:
		op := metric.WithAttributes(attribute.String("operation", ev.Operation))
		o.intentAge.Record(ctx, ev.Age.Seconds(), op)
		if ev.Retention > 0 && ev.Age > ev.Retention {
			o.intentPast.Add(ctx, 1, op)
		}
		return
	case idem.EventReplay:
		op := metric.WithAttributes(attribute.String("operation", ev.Operation))
		o.replayAge.Record(ctx, ev.Age.Seconds(), op)
		if ev.Retention > 0 {
			o.retention.Record(ctx, ev.Retention.Seconds(), op)
			o.replayRatio.Record(ctx, ev.Age.Seconds()/ev.Retention.Seconds(), op)
		}
		if ev.Status >= 500 {
			o.replayedFail.Add(ctx, 1, op)
		}
	case idem.EventWait:
		o.wait.Record(ctx, ev.Duration.Seconds(), metric.WithAttributes(attribute.String("operation", ev.Operation), attribute.String("outcome", ev.Cause)))
	case idem.EventTakeover:
		o.takeovers.Add(ctx, 1, metric.WithAttributes(attribute.String("operation", ev.Operation), attribute.String("cause", ev.Cause)))
	case idem.EventWeakKey:
		o.weakKeys.Add(ctx, 1, metric.WithAttributes(attribute.String("operation", ev.Operation), attribute.String("reason", ev.Cause)))
	case idem.EventKeyless:
		o.keyless.Add(ctx, 1, metric.WithAttributes(attribute.String("operation", ev.Operation), attribute.String("client", ev.Cause)))
	case idem.EventClaim:
		if ev.Retention > 0 {
			o.retention.Record(ctx, ev.Retention.Seconds(), metric.WithAttributes(attribute.String("operation", ev.Operation)))
		}
	}
	o.events.Add(ctx, 1, metric.WithAttributes(attribute.String("operation", ev.Operation), attribute.String("event", string(ev.Kind))))
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("idem.event."+string(ev.Kind), trace.WithAttributes(AttrOperation.String(ev.Operation)))
	}
	req, _ := ctx.Value(requestKey{}).(*request)
	if req == nil {
		return
	}
	req.mu.Lock()
	defer req.mu.Unlock()
	switch ev.Kind {
	case idem.EventReplay:
		req.replayed = true
	case idem.EventResume:
		req.resumed = true
	}
	if out, ok := outcomes[ev.Kind]; ok {
		req.outcome = out
	}
}

// see records, at zero, the rare counters of an operation seen for the
// first time, as idemprom does: an alert's increase() cannot see a
// series' first samples.
func (o *Observer) see(ctx context.Context, op string) {
	if _, ok := o.seen.Load(op); ok {
		return
	}
	if _, loaded := o.seen.LoadOrStore(op, true); loaded {
		return
	}
	attr := attribute.String("operation", op)
	for _, k := range []idem.EventKind{idem.EventInFlight, idem.EventMismatch, idem.EventRelease, idem.EventTakeover,
		idem.EventFenced, idem.EventResume, idem.EventAmbiguous, idem.EventCompleterRun, idem.EventCompleterFailed,
		idem.EventSameRequestNewKey, idem.EventPrimaryChanged, idem.EventReplay, idem.EventWait} {
		o.events.Add(ctx, 0, metric.WithAttributes(attr, attribute.String("event", string(k))))
	}
	for _, c := range []string{idem.TakeoverExpired, idem.TakeoverCompleter} {
		o.takeovers.Add(ctx, 0, metric.WithAttributes(attr, attribute.String("cause", c)))
	}
	o.replayedFail.Add(ctx, 0, metric.WithAttributes(attr))
	o.intentPast.Add(ctx, 0, metric.WithAttributes(attr))
}

var (
	_ idem.ContextObserver = (*Observer)(nil)
	_ idem.Tracer          = (*Observer)(nil)
)

package idemotel_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemotel"
)

func TestMain(m *testing.M) { idemtest.Main(m) }

type env struct {
	eng     *idem.Engine
	spans   *tracetest.SpanRecorder
	metrics *sdkmetric.ManualReader
	logs    *bytes.Buffer
	tp      *sdktrace.TracerProvider
}

// newEnv runs an engine whose observer and tracer is idemotel's, on an SDK
// that records spans and metrics in memory, and whose logger writes JSON
// through idemotel.LogHandler.
func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { tp.Shutdown(ctx); mp.Shutdown(ctx) })
	obs, err := idemotel.New(tp, mp)
	if err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	te := idemtest.New(t, idem.Options{Observer: obs, Tracer: obs,
		Logger: slog.New(idemotel.LogHandler(slog.NewJSONHandler(logs, nil)))})
	if _, err := te.Pool.Exec(ctx, `CREATE TABLE rows (key text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &env{eng: te.Engine, spans: spans, metrics: reader, logs: logs, tp: tp}
}

type state struct {
	Charge string `json:"charge"`
}

// phases: a local phase, a foreign one, and the final one, as the payments
// example's createPayment; charge is the foreign phase's error.
func phases(key string, charge error) []idem.Phase[state] {
	return []idem.Phase[state]{
		{Name: "record", Local: func(ctx context.Context, tx pgx.Tx, s *state) error {
			_, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ($1)`, key)
			return err
		}},
		{Name: "charge", Foreign: func(ctx context.Context, dk string, s *state) error {
			s.Charge = "ch_" + dk[:8]
			return charge
		}},
		{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *state) (*idem.Response, error) {
			return &idem.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}},
				Body: []byte(`{"charge":"` + s.Charge + `"}`)}, nil
		}},
	}
}

func request(key string) idem.KeyedRequest {
	sum := sha256.Sum256([]byte("body"))
	return idem.KeyedRequest{Scope: "acct", Key: key, Fingerprint: sum[:]}
}

var op = &idem.Operation{ID: "createPayment", Policy: idem.Policy{Lease: 5 * time.Second}}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestSpans: a fresh request makes a request span with a claim span and one
// span per phase as children, all in one trace; a replay makes a request
// span marked replayed with only its claim; an ambiguous failure and the
// retry that resumes it carry their outcome and resumed flag.
func TestSpans(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := idem.Run(ctx, e.eng, op, request("k1"), phases("k1", nil)); err != nil {
		t.Fatal(err)
	}
	ended := e.spans.Ended()
	var names []string
	for _, s := range ended {
		names = append(names, s.Name())
	}
	want := []string{"idem.claim", "idem.phase", "idem.phase", "idem.phase", "idem.request"}
	if len(names) != len(want) {
		t.Fatalf("spans %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("spans %v, want %v", names, want)
		}
	}
	root := ended[4]
	if root.Parent().IsValid() {
		t.Errorf("the request span has a parent: %v", root.Parent())
	}
	var phaseNames []string
	for _, s := range ended[:4] {
		if s.Parent().SpanID() != root.SpanContext().SpanID() || s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("%s is not a child of the request span", s.Name())
		}
		if s.Name() == "idem.phase" {
			phaseNames = append(phaseNames, attrs(s)[idemotel.AttrPhase].AsString())
		}
	}
	if got := phaseNames; len(got) != 3 || got[0] != "record" || got[1] != "charge" || got[2] != "finish" {
		t.Errorf("phase spans %v, want record, charge, finish", got)
	}
	a := attrs(root)
	if a[idemotel.AttrOperation].AsString() != "createPayment" || a[idemotel.AttrReplayed].AsBool() ||
		a[idemotel.AttrResumed].AsBool() || a[idemotel.AttrOutcome].AsString() != idemotel.OutcomeCompleted {
		t.Errorf("request span attributes %v", a)
	}

	// The replay: a request span with its claim, nothing else.
	e.spans.Reset()
	out, err := idem.Run(ctx, e.eng, op, request("k1"), phases("k1", nil))
	if err != nil || !out.Replayed {
		t.Fatalf("replay: %v %v", out, err)
	}
	ended = e.spans.Ended()
	if len(ended) != 2 || ended[0].Name() != "idem.claim" || ended[1].Name() != "idem.request" {
		t.Fatalf("replay spans: %d", len(ended))
	}
	if a := attrs(ended[1]); !a[idemotel.AttrReplayed].AsBool() || a[idemotel.AttrOutcome].AsString() != idemotel.OutcomeReplayed {
		t.Errorf("replay attributes %v", a)
	}

	// An ambiguous failure of the foreign phase, then the retry resumes.
	e.spans.Reset()
	if _, err := idem.Run(ctx, e.eng, op, request("k2"), phases("k2", errors.New("card network: 503"))); err == nil {
		t.Fatal("the failing charge succeeded")
	}
	ended = e.spans.Ended()
	req := ended[len(ended)-1]
	if a := attrs(req); a[idemotel.AttrOutcome].AsString() != idemotel.OutcomeAmbiguous || req.Status().Code != codes.Error {
		t.Errorf("ambiguous request: attributes %v, status %v", a, req.Status())
	}
	var failedPhase sdktrace.ReadOnlySpan
	for _, s := range ended {
		if s.Name() == "idem.phase" && attrs(s)[idemotel.AttrPhase].AsString() == "charge" {
			failedPhase = s
		}
	}
	if failedPhase == nil || failedPhase.Status().Code != codes.Error {
		t.Errorf("the failed phase's span is not marked as an error: %v", failedPhase)
	}
	e.spans.Reset()
	if out, err := idem.Run(ctx, e.eng, op, request("k2"), phases("k2", nil)); err != nil || !out.Resumed {
		t.Fatalf("retry: %v %v", out, err)
	}
	ended = e.spans.Ended()
	if a := attrs(ended[len(ended)-1]); !a[idemotel.AttrResumed].AsBool() || a[idemotel.AttrOutcome].AsString() != idemotel.OutcomeCompleted {
		t.Errorf("resumed request attributes %v", a)
	}
	// Each event is on the span of the step it happened in.
	if ev := spanEvents(ended[0]); ended[0].Name() != "idem.claim" || !contains(ev, "idem.event.takeover") {
		t.Errorf("%s events %v, want idem.event.takeover", ended[0].Name(), ev)
	}
	if ev := spanEvents(ended[len(ended)-1]); !contains(ev, "idem.event.resume") || !contains(ev, "idem.event.complete") {
		t.Errorf("resumed request span events %v, want idem.event.resume and idem.event.complete", ev)
	}
}

func spanEvents(s sdktrace.ReadOnlySpan) []string {
	var names []string
	for _, ev := range s.Events() {
		names = append(names, ev.Name)
	}
	return names
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestMetrics: the same metrics as idemprom, as OTel instruments.
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for range 2 {
		if _, err := idem.Run(ctx, e.eng, op, request("k"), phases("k", nil)); err != nil {
			t.Fatal(err)
		}
	}
	other := sha256.Sum256([]byte("another body"))
	if _, err := idem.Run(ctx, e.eng, op, idem.KeyedRequest{Scope: "acct", Key: "k", Fingerprint: other[:]}, phases("k", nil)); err == nil {
		t.Fatal("a reused key with another body was not refused")
	}
	if _, err := idemadmin.Prune(ctx, e.eng, idemadmin.PruneOptions{Batch: 10}); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := e.metrics.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != idemotel.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			got[m.Name] = m
		}
	}
	events := map[string]int64{}
	for _, dp := range got["idemgen.events"].Data.(metricdata.Sum[int64]).DataPoints {
		op, _ := dp.Attributes.Value("operation")
		ev, _ := dp.Attributes.Value("event")
		events[op.AsString()+"/"+ev.AsString()] = dp.Value
	}
	for k, want := range map[string]int64{"createPayment/claim": 1, "createPayment/complete": 1,
		"createPayment/replay": 1, "createPayment/mismatch": 1} {
		if events[k] != want {
			t.Errorf("idemgen.events %s = %d, want %d (all: %v)", k, events[k], want, events)
		}
	}
	phases := map[string]uint64{}
	for _, dp := range got["idemgen.phase.duration"].Data.(metricdata.Histogram[float64]).DataPoints {
		ph, _ := dp.Attributes.Value("phase")
		out, _ := dp.Attributes.Value("outcome")
		phases[ph.AsString()+"/"+out.AsString()] = dp.Count
	}
	if phases["record/ok"] != 1 || phases["charge/ok"] != 1 || phases["finish/ok"] != 1 {
		t.Errorf("idemgen.phase.duration counts %v, want one ok run of each phase", phases)
	}
	if m, ok := got["idemgen.phase.duration"]; !ok || m.Unit != "s" {
		t.Errorf("idemgen.phase.duration unit %q", m.Unit)
	}
	stuck := got["idemgen.records.stuck"].Data.(metricdata.Gauge[int64]).DataPoints
	if len(stuck) != 1 || stuck[0].Value != 0 {
		t.Errorf("idemgen.records.stuck %v, want one point of 0 after the prune", stuck)
	}
	if _, ok := got["idemgen.pruned"]; ok {
		t.Errorf("idemgen.pruned recorded although nothing was pruned")
	}
}

// TestLogsCarryTheTrace: a warning the engine logs during an execution
// (here: a refused release, after a phase committed) carries the trace id
// of the request's span.
func TestLogsCarryTheTrace(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ph := phases("k", nil)
	ph[1].Foreign = func(context.Context, string, *state) error {
		return idem.Release(errors.New("the card was refused before any charge"))
	}
	if _, err := idem.Run(ctx, e.eng, op, request("k"), ph); err == nil {
		t.Fatal("the released request succeeded")
	}
	var line struct {
		Msg     string `json:"msg"`
		TraceID string `json:"trace_id"`
	}
	if err := json.Unmarshal(e.logs.Bytes(), &line); err != nil {
		t.Fatalf("log %q: %v", e.logs, err)
	}
	ended := e.spans.Ended()
	want := ended[len(ended)-1].SpanContext().TraceID().String()
	if line.TraceID != want {
		t.Errorf("log line %q has trace_id %q, want the request's %s", line.Msg, line.TraceID, want)
	}
}

// TestSpansClaimLast: an all-local operation (the record written last, in
// the phases' transaction) has the same spans: a request with its claim and
// a span per phase, and a duplicate replays with outcome replayed.
func TestSpansClaimLast(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	local := phases("k", nil)
	local = []idem.Phase[state]{local[0], local[2]}
	last := &idem.Operation{ID: "recordOnly", Policy: idem.Policy{Lease: 5 * time.Second, Claim: idem.ClaimLast}}
	for i, want := range []string{idemotel.OutcomeCompleted, idemotel.OutcomeReplayed} {
		e.spans.Reset()
		if _, err := idem.Run(ctx, e.eng, last, request("k"), local); err != nil {
			t.Fatal(err)
		}
		ended := e.spans.Ended()
		root := ended[len(ended)-1]
		if root.Name() != "idem.request" || attrs(root)[idemotel.AttrOutcome].AsString() != want {
			t.Fatalf("run %d: last span %s, attributes %v; want idem.request with outcome %s", i, root.Name(), attrs(root), want)
		}
		var names []string
		for _, s := range ended[:len(ended)-1] {
			names = append(names, s.Name())
			if s.Parent().SpanID() != root.SpanContext().SpanID() {
				t.Errorf("run %d: %s is not a child of the request span", i, s.Name())
			}
		}
		if wantNames := map[int]string{0: "idem.claim idem.phase idem.phase", 1: "idem.claim"}[i]; strings.Join(names, " ") != wantNames {
			t.Errorf("run %d: child spans %v, want %s", i, names, wantNames)
		}
	}
}

package idemprom_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemprom"
)

func TestMain(m *testing.M) { idemtest.Main(m) }

// The signals of the failures that look like success, each moved by real
// requests through an engine on PostgreSQL, and left alone by the
// requests that must not move it.

var op = &idem.Operation{ID: "pay", Policy: idem.Policy{Retention: time.Hour, Lease: 10 * time.Second}}

type signals struct {
	t   *testing.T
	reg *prometheus.Registry
	env *idemtest.Env
}

func newSignals(t *testing.T, opts idem.Options) *signals {
	t.Helper()
	reg := prometheus.NewRegistry()
	o, err := idemprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	opts.Observer = o
	return &signals{t: t, reg: reg, env: idemtest.New(t, opts)}
}

// run sends one request: body is what is fingerprinted, status what the
// phase answers.
func (s *signals) run(scope, key, body string, status int, mod ...func(*idem.KeyedRequest)) *idem.Outcome {
	s.t.Helper()
	fp := sha256.Sum256([]byte(body))
	req := idem.KeyedRequest{Scope: scope, Key: key, Fingerprint: fp[:]}
	for _, m := range mod {
		m(&req)
	}
	out, err := idem.Run(context.Background(), s.env.Engine, op, req, []idem.Phase[struct{}]{{Name: "do",
		Final: func(ctx context.Context, tx pgx.Tx, _ *struct{}) (*idem.Response, error) {
			return &idem.Response{Status: status, Body: []byte(body)}, nil
		}}})
	if err != nil {
		s.t.Fatalf("%s/%s: %v", scope, key, err)
	}
	return out
}

// value is the sum of the samples of metric name whose labels include
// labels (a counter's or gauge's value, a histogram's count).
func (s *signals) value(name string, labels ...string) float64 {
	s.t.Helper()
	families, err := s.reg.Gather()
	if err != nil {
		s.t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

// bucket is the cumulative count of histogram name's bucket le.
func (s *signals) bucket(name string, le float64) float64 {
	s.t.Helper()
	families, _ := s.reg.Gather()
	for _, f := range families {
		if f.GetName() == name {
			for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
				if b.GetUpperBound() == le {
					return float64(b.GetCumulativeCount())
				}
			}
		}
	}
	s.t.Fatalf("no bucket %v of %s", le, name)
	return 0
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// TestSameRequestNewKey: a client that mints a key per attempt claims one
// request under several keys; a retry of one key, and the same body from
// another scope, do not count.
func TestSameRequestNewKey(t *testing.T) {
	t.Parallel()
	s := newSignals(t, idem.Options{})
	s.run("acct_1", "k1", `{"amount":1}`, 201)
	s.run("acct_1", "k1", `{"amount":1}`, 201) // a retry: a replay
	s.run("acct_2", "k9", `{"amount":1}`, 201) // another caller
	s.run("acct_1", "k2", `{"amount":2}`, 201) // another request
	if n := s.value("idemgen_events_total", "event", "same_request_new_key"); n != 0 {
		t.Fatalf("same_request_new_key = %v after keys used once each; want 0", n)
	}
	s.run("acct_1", "k3", `{"amount":1}`, 201) // k1's request under a new key
	s.run("acct_1", "k4", `{"amount":1}`, 201)
	if n := s.value("idemgen_events_total", "operation", "pay", "event", "same_request_new_key"); n != 2 {
		t.Fatalf("same_request_new_key = %v after two new keys for one request; want 2", n)
	}
}

// TestReplayAge: a replay is observed with its age against the retention;
// an answer stored long ago (its record aged by hand) lands past 0.9 of
// the retention. A first execution is no replay.
func TestReplayAge(t *testing.T) {
	t.Parallel()
	// No replay cache: every replay reads its record.
	s := newSignals(t, idem.Options{ReplayCacheBytes: -1})
	s.run("acct_1", "fresh", "a", 201)
	if n := s.value("idemgen_replay_age_seconds"); n != 0 {
		t.Fatalf("replay ages observed after a first execution: %v", n)
	}
	s.run("acct_1", "fresh", "a", 201)
	if n, young := s.value("idemgen_replay_age_ratio"), s.bucket("idemgen_replay_age_ratio", 0.1); n != 1 || young != 1 {
		t.Fatalf("a replay at once: %v observed, %v under 0.1 of the retention; want 1 and 1", n, young)
	}
	if r := s.value("idemgen_retention_seconds", "operation", "pay"); r != 3600 {
		t.Fatalf("idemgen_retention_seconds = %v; want 3600", r)
	}
	// An answer stored 57 minutes ago: its record expires in 3.
	s.run("acct_1", "old", "b", 201)
	if _, err := s.env.Pool.Exec(context.Background(), `UPDATE records SET expires_at = now() + interval '3 minutes' WHERE id = record_id('pay', 'acct_1', 'old')`); err != nil {
		t.Fatal(err)
	}
	s.run("acct_1", "old", "b", 201)
	if past := s.value("idemgen_replay_age_ratio") - s.bucket("idemgen_replay_age_ratio", 0.9); past != 1 {
		t.Fatalf("%v replays past 0.9 of the retention; want 1 (the 57-minute-old answer)", past)
	}
	if old := s.value("idemgen_replay_age_seconds") - s.bucket("idemgen_replay_age_seconds", 1800); old != 1 {
		t.Fatalf("%v replays older than 30 minutes; want 1", old)
	}
}

// TestReplayedFailures: a stored 5xx replayed counts; a stored 2xx or 4xx
// does not.
func TestReplayedFailures(t *testing.T) {
	t.Parallel()
	s := newSignals(t, idem.Options{})
	for _, st := range []int{201, 409} {
		key := fmt.Sprint("k", st)
		s.run("acct_1", key, key, st)
		s.run("acct_1", key, key, st)
	}
	if n := s.value("idemgen_replayed_failures_total"); n != 0 {
		t.Fatalf("replayed failures = %v after replays of 201 and 409; want 0", n)
	}
	s.run("acct_1", "k503", "k503", http.StatusServiceUnavailable)
	if n := s.value("idemgen_replayed_failures_total"); n != 0 {
		t.Fatalf("replayed failures = %v after storing a 503; want 0 until it is replayed", n)
	}
	s.run("acct_1", "k503", "k503", http.StatusServiceUnavailable)
	if n := s.value("idemgen_replayed_failures_total", "operation", "pay"); n != 1 {
		t.Fatalf("replayed failures = %v after a 503 replayed; want 1", n)
	}
}

// TestIntentAge: a request that gives its intent's age is observed, and
// counted when the intent is older than the retention; a request that
// gives none is not observed.
func TestIntentAge(t *testing.T) {
	t.Parallel()
	s := newSignals(t, idem.Options{})
	s.run("acct_1", "k1", "a", 201)
	if n := s.value("idemgen_intent_age_seconds"); n != 0 {
		t.Fatalf("intent ages observed without one sent: %v", n)
	}
	age := func(d time.Duration) func(*idem.KeyedRequest) {
		return func(r *idem.KeyedRequest) { r.IntentAge, r.IntentAgeSent = d, true }
	}
	s.run("acct_1", "k2", "b", 201, age(0))
	s.run("acct_1", "k2", "b", 201, age(10*time.Minute))
	if n, past := s.value("idemgen_intent_age_seconds"), s.value("idemgen_intent_past_retention_total"); n != 2 || past != 0 {
		t.Fatalf("within the retention: %v ages observed, %v past it; want 2 and 0", n, past)
	}
	s.run("acct_1", "k3", "c", 201, age(2*time.Hour))
	if past := s.value("idemgen_intent_past_retention_total", "operation", "pay"); past != 1 {
		t.Fatalf("an intent of 2h against a retention of 1h: %v counted; want 1", past)
	}
}

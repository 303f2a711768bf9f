package idem_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// logLines is a slog handler's output, safe for concurrent writes.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// records returns the JSON records whose msg is msg.
func (l *logLines) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// TestFailureSaysWhy: a failed execution is logged once, at the engine's
// logger, with its operation, scope, key, phase, recovery point, whether it
// resumed, what became of it and the error with its SQLSTATE; Run's error
// says which phase failed and that the execution had resumed (a takeover),
// and still unwraps to what the request is answered with.
func TestFailureSaysWhy(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, m *env) {
		var logs logLines
		e := newEnvIn(t, m.mode, idem.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		ctx := context.Background()
		cd := &card{charges: map[string]string{}}
		runs := 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), threePhases("k", cd, &runs, "after-charge"))
		}()
		<-done
		e.expireLeases()
		phases := threePhases("k", cd, &runs, "")
		phases[2].Final = func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
			_, err := tx.Exec(ctx, `SELECT 1/0`)
			return nil, err
		}
		_, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), phases)
		var pe *idem.PhaseError
		if !errors.As(err, &pe) || pe.Phase != "finish" || pe.RecoveryPoint != "record" || !pe.Resumed || pe.Operation != payOp.ID {
			t.Fatalf("the takeover's failure: %#v (%v); want a PhaseError in finish, resumed from record", pe, err)
		}
		if kindOf(err) != idemtype.KindFailed {
			t.Errorf("answered %q; want failed", kindOf(err))
		}
		// The client is told what happened and what to do, in words: a
		// Stripe-shaped error's message is the detail.
		var ie *idem.Error
		if errors.As(err, &ie) && !strings.Contains(ie.Detail, "retry with the same key") {
			t.Errorf("the failure's detail is %q; want it to say a retry with the same key resumes", ie.Detail)
		}
		got := logs.records(t, "idem: execution failed")
		if len(got) != 1 {
			t.Fatalf("%d failure lines; want 1:\n%s", len(got), logs.buf.String())
		}
		want := map[string]any{"level": "ERROR", "operation": payOp.ID, "scope": e.eng.LogScope("t"), "idempotency_key": "k", "phase": "finish",
			"recovery_point": "record", "resumed": true, "outcome": "failed", "sqlstate": "22012"}
		for k, v := range want {
			if got[0][k] != v {
				t.Errorf("the failure line's %s is %v; want %v", k, got[0][k], v)
			}
		}
		if !strings.Contains(got[0]["err"].(string), "division by zero") {
			t.Errorf("the failure line's err is %v", got[0]["err"])
		}

		// A failure with no effect releases the key: logged at Info, and Run
		// still returns the phase's own error beneath the PhaseError.
		bad := errors.New("amount must be positive")
		_, err = idem.Run(ctx, e.eng, payOp, request("t", "k2", "b"), []idem.Phase[payState]{
			{Name: "validate", Final: func(context.Context, pgx.Tx, *payState) (*idem.Response, error) { return nil, idem.Release(bad) }},
		})
		if !errors.As(err, &pe) || pe.Phase != "validate" || pe.Resumed || !errors.Is(err, bad) {
			t.Fatalf("a released failure: %v", err)
		}
		got = logs.records(t, "idem: execution failed")
		if len(got) != 2 || got[1]["level"] != "INFO" || got[1]["outcome"] != "released" || got[1]["idempotency_key"] != "k2" {
			t.Errorf("the released failure's line: %v", got[1:])
		}
	})
}

// TestReplayReadsWithoutClaiming: Engine.Replay gives a completed key's
// stored answer to the same request, and nothing otherwise: not to another
// body, not for a key in progress, not for one never used; it claims
// nothing.
func TestReplayReadsWithoutClaiming(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if resp, err := e.eng.Replay(ctx, payOp, request("t", "never", "b")); resp != nil || err != nil {
			t.Fatalf("a key never used: %v, %v", resp, err)
		}
		if e.count(`SELECT count(*) FROM `+e.schema+`.records`) != 0 {
			t.Fatal("Replay claimed a key")
		}
		out, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), []idem.Phase[payState]{
			{Name: "finish", Final: func(context.Context, pgx.Tx, *payState) (*idem.Response, error) { return created(`{"n":1}`), nil }},
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, fresh := range []bool{false, true} {
			eng := e.eng
			if fresh { // no replay cache: read from the table
				eng = mustEngineWith(t, e, idem.Options{})
			}
			resp, err := eng.Replay(ctx, payOp, request("t", "k", "b"))
			if err != nil || resp == nil || string(resp.Body) != string(out.Response.Body) || resp.Status != 201 {
				t.Fatalf("the same request (fresh engine %t): %v, %v; want the stored 201", fresh, resp, err)
			}
			if resp, err := eng.Replay(ctx, payOp, request("t", "k", "other")); resp != nil || err != nil {
				t.Fatalf("another body (fresh engine %t): %v, %v; want nothing", fresh, resp, err)
			}
		}
		held, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			idem.Run(ctx, e.eng, payOp, request("t", "busy", "b"), committedFirst([]idem.Phase[payState]{
				{Name: "finish", Final: func(context.Context, pgx.Tx, *payState) (*idem.Response, error) {
					close(held)
					<-release
					return created(`{}`), nil
				}},
			}))
		}()
		<-held
		resp, err := e.eng.Replay(ctx, payOp, request("t", "busy", "b"))
		close(release)
		<-done
		if resp != nil || err != nil {
			t.Fatalf("a key in progress: %v, %v; want nothing", resp, err)
		}
	})
}

// TestDuplicateComesBackWhenLikelyDone: once an execution of the operation
// has completed here, a duplicate that finds the key in flight is told to
// retry after about that long, not after the whole lease.
func TestDuplicateComesBackWhenLikelyDone(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		slow := func(held chan<- struct{}, release <-chan struct{}) []idem.Phase[payState] {
			return committedFirst([]idem.Phase[payState]{{Name: "finish", Final: func(context.Context, pgx.Tx, *payState) (*idem.Response, error) {
				if held != nil {
					close(held)
				}
				<-release
				return created(`{}`), nil
			}}})
		}
		open := make(chan struct{})
		close(open)
		if _, err := idem.Run(ctx, e.eng, payOp, request("t", "seed", "b"), slow(nil, open)); err != nil {
			t.Fatal(err)
		}
		held, release, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
		go func() {
			defer close(finished)
			idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), slow(held, release))
		}()
		<-held
		_, err := idem.Run(ctx, e.eng, payOp, noWait(request("t", "k", "b")), slow(nil, open))
		close(release)
		<-finished
		var perr *idem.Error
		if !errors.As(err, &perr) || perr.Kind != idemtype.KindInFlight {
			t.Fatalf("the duplicate: %v; want in-flight", err)
		}
		if perr.RetryAfter != idem.MinRetryAfter {
			t.Errorf("Retry-After %v after an execution of a few milliseconds; want %v, not the lease", perr.RetryAfter, idem.MinRetryAfter)
		}
	})
}

// TestReleaseThatFailsIsNotAnsweredAsReleased: a phase asks for its key to
// be released (a refusal of the request: idem.Release), but the DELETE
// that frees the key fails (the store lost the connection). The key is
// still claimed, bound to this request's fingerprint: answering the
// phase's 4xx would tell the client its key is free, and its corrected
// request under the same key would get 422. It is answered 503 with
// Retry-After instead; the same request retried takes the key over once
// the lease is out, is refused again, and frees the key; then the
// corrected request runs.
func TestReleaseThatFailsIsNotAnsweredAsReleased(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		e.raiseOn("DELETE", "connection_failure", "connection lost")
		ctx := context.Background()
		bad := errors.New("amount must be positive")
		refuse := []idem.Phase[payState]{
			{Name: "check", Foreign: func(context.Context, string, *payState) error { return idem.Release(bad) }},
			{Name: "finish", Final: func(context.Context, pgx.Tx, *payState) (*idem.Response, error) {
				return &idem.Response{Status: 201}, nil
			}},
		}
		_, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "amount=-1"), refuse)
		var ie *idem.Error
		if !errors.As(err, &ie) || ie.Kind != idemtype.KindUnavailable || ie.RetryAfter <= 0 {
			t.Fatalf("a release whose DELETE failed: %v; want 503 unavailable with Retry-After, the key still held", err)
		}
		if n := e.count(`SELECT count(*) FROM records`); n != 1 {
			t.Fatalf("%d records; want the claim, still there", n)
		}
		e.unraise()
		e.expireLeases()
		if _, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "amount=-1"), refuse); !errors.Is(err, bad) {
			t.Fatalf("the same request again: %v; want the phase's refusal, the key freed", err)
		}
		ok := refuse[:1:1]
		ok[0].Foreign = func(context.Context, string, *payState) error { return nil }
		o, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "amount=5"), append(ok, refuse[1]))
		if err != nil || o.Response.Status != 201 {
			t.Fatalf("the corrected request under the same key: %v; want it run", err)
		}
	}, notIn{idem.ClaimLast, "its phases include a foreign one, which last mode does not run"})
}

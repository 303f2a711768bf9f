package idemtest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/stephook"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Case is one operation and one request for Check to run through every way
// its execution can be interrupted.
type Case[S any] struct {
	// Operation is the operation and its policy: the generated
	// XOperation().
	Operation *idem.Operation
	// Phases returns the operation's phases bound to the request, built as
	// a new process builds them: the generated XPhaseList with a new
	// implementation. Check calls it for every attempt, so a phase that
	// keeps what a later phase needs in its implementation rather than in
	// the state S loses it on a resume here, as it would after a crash.
	// Check wraps what it returns; the phases themselves are run as they
	// are.
	Phases func() []idem.Phase[S]
	// Handler, instead of Phases, returns the operation's handler bound to
	// the request (idem.RunHandler; the generated XHandler), built anew for
	// every attempt. Check learns its steps (idem.Local, idem.Foreign)
	// from the clean execution and crashes it inside and after each, and
	// inside its final transaction; S is then unused (struct{}).
	Handler func() idem.Handler
	// Scope is the request's resolved scope (the principal, a header's
	// value); "" for a global scope. Phases read it from
	// idem.ExecutionFrom(ctx).
	Scope string
	// Setup creates the service's tables and the rows the request needs,
	// through pool, whose search_path is a schema of the scenario's own
	// (the engine's tables are there too). Check calls it once per
	// scenario.
	Setup func(ctx context.Context, pool *pgxpool.Pool) error
	// Migrate, when set, runs the service's own migrations (golang-migrate,
	// goose, its own runner) on a database of the scenario's own, given by
	// its connection string: what its SQL names schema-qualified
	// (examination.exams) is where production has it, and Check compares
	// the tables of every schema there but the engine's. The engine's
	// tables are in a schema of their own, the search_path of Setup's
	// pool, which runs after Migrate. Check calls it once per scenario.
	Migrate func(ctx context.Context, dsn string) error
	// Volatile names the columns whose values differ between two correct
	// runs (timestamps): "column" in every table, or "table.column".
	// Serial and identity columns need not be named (see docs/testing.md).
	Volatile []string
	// VolatileResponse are JSON Pointers into the response body left out
	// of the comparison: a timestamp the answer carries, say.
	VolatileResponse []string
	// Recorder, when set, is the recorder that the fakes of other systems
	// call (Recorder.Call) on every request a foreign phase makes: Check
	// then fails a phase that sends one key with two sets of parameters, or
	// a key other than its own.
	Recorder *Recorder
	// Invariant, when set, is checked after every scenario and after
	// bursts of concurrent requests under different keys, in a read-only
	// repeatable-read transaction: what must hold of the service's tables
	// whatever the interleaving (no payment refunded beyond its amount).
	Invariant func(ctx context.Context, tx pgx.Tx) error
	// Concurrency is how many duplicates run at once, and how many
	// requests a burst sends (default 8).
	Concurrency int
	// Options configure each scenario's engine (its claim mode, say);
	// Check sets Schema, and a Logger that discards when none is set.
	Options idem.Options
}

// Finding is one thing Check found wrong.
type Finding struct {
	Scenario string // which scenario: "crash inside record_payment, before its commit"
	Phase    string // the phase concerned, "" when none is
	Rule     Rule   // what was broken
	Detail   string // what differed
}

func (f Finding) String() string {
	s := f.Scenario + ": "
	if f.Phase != "" {
		s += "phase " + f.Phase + ": "
	}
	return s + string(f.Rule) + ": " + f.Detail
}

// Rule names what a Finding found broken.
type Rule string

// The rules Check enforces.
const (
	// RuleRows: the scenario ended with other rows in the service's tables
	// than the clean execution (a write outside the phase's transaction, a
	// phase committed twice, a resume that lost state).
	RuleRows Rule = "rows differ from the clean execution's"
	// RuleResponse: the scenario's answer differs from the clean
	// execution's.
	RuleResponse Rule = "response differs from the clean execution's"
	// RuleOnce: a key executed more than once (a phase ran for a
	// completed key; two of the concurrent duplicates executed).
	RuleOnce Rule = "one execution per key"
	// RuleForeignParams: one derived key was sent with two sets of
	// parameters (an amount from the clock or a live table).
	RuleForeignParams Rule = "a foreign call's parameters come from stored state"
	// RuleForeignKey: a foreign phase sent a key other than its own.
	RuleForeignKey Rule = "a foreign phase sends its key"
	// RuleInvariant: the case's invariant failed.
	RuleInvariant Rule = "invariant"
	// RuleFencing: an owner that lost its lease still completed.
	RuleFencing Rule = "a stale owner commits nothing"
	// RuleFailed: an execution the scenario needs failed, did not reach its
	// crash point, or did not end.
	RuleFailed Rule = "an execution does not complete"
)

// Check runs the case's request through every scenario and fails t once per
// Finding, naming the scenario, the phase and what differed. The scenarios,
// each on a database schema of its own with the engine's tables and what
// Setup makes:
//
//   - a clean execution, the baseline: its rows (less Volatile columns) and
//     its answer are what every other scenario must end with;
//   - a retry of the completed key: nothing of it remains, the answer is
//     replayed; no phase runs, but in last mode, where they run and roll
//     back;
//   - for each local phase, a crash inside it before its commit, then a
//     retry; for each local phase followed by another local one, a crash
//     right after its commit, then a retry that resumes;
//   - for each foreign phase, a crash before the other system acted and one
//     after, then a retry; and a takeover while it hangs past the lease,
//     after which the stale owner must commit nothing;
//   - Concurrency duplicates of the key at once: one execution;
//   - with an Invariant, bursts of Concurrency requests under different
//     keys at once.
//
// A crash is the end of the goroutine that runs the execution
// (runtime.Goexit): its transaction rolls back as a dead connection's
// would, and its lease is left to expire, which Check hastens. Every
// scenario sends the same request under the same key, so a fake of another
// system that answers by key gives each the same answer.
func Check[S any](t testing.TB, c Case[S]) {
	t.Helper()
	for _, f := range Findings(t, c) {
		t.Errorf("idemtest.Check %s: %s", c.Operation.ID, f)
	}
}

// Findings runs Check's scenarios and returns what they found instead of
// failing t (which it still fails when a scenario cannot run at all): for
// a test that shows a broken phase is caught.
func Findings[S any](t testing.TB, c Case[S]) []Finding {
	t.Helper()
	if c.Operation == nil || (c.Phases == nil) == (c.Handler == nil) {
		t.Fatalf("idemtest.Check: Case.Operation and one of Case.Phases and Case.Handler are required")
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.Options.Logger == nil {
		c.Options.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Options.ReplayCacheBytes == 0 {
		// Every replay reads the stored record, as another process would.
		c.Options.ReplayCacheBytes = -1
	}
	// One key for every scenario of this check (so that a fake that answers
	// by key gives each the same answer), and another for every other check
	// (so that two cases of one operation sharing a fake do not meet).
	id := fmt.Sprintf("%s\x00%s\x00%d", t.Name(), c.Operation.ID, checks.Add(1))
	fp := sha256.Sum256([]byte("idemtest\x00" + id))
	k := &checker[S]{t: t, c: c, req: idem.KeyedRequest{Scope: c.Scope, Key: fmt.Sprintf("idemtest-%x", fp[:8]), Fingerprint: fp[:]}}
	k.run()
	return k.findings
}

// checks counts the checks run, to give each its own key.
var checks atomic.Int64

// checker runs one Case.
type checker[S any] struct {
	t        testing.TB
	c        Case[S]
	req      idem.KeyedRequest
	findings []Finding
	scenario string
	base     *world
	baseRows rows
	// baseRenumbered is baseRows with serial ids numbered by their order
	// (see duplicates).
	baseRenumbered rows
	baseResp       *idem.Response
	// steps are the handler's steps, as the clean execution took them, and
	// its final transaction last: phases that stand for them in the
	// scenarios (Case.Handler).
	steps []idem.Phase[S]
	// reached is the last phase (by index) the clean execution started.
	reached int
}

// world is one scenario's database: a schema with the engine's tables and
// the service's, and an engine on it.
type world struct {
	env    *Env
	tables []string // the service's tables, by display name (relationName), in order
	seqs   []string // the service's sequences, the same
	// schemas are where the service's relations are looked for: the
	// scenario's schema, or nil (every schema of a database of the
	// scenario's own, Case.Migrate).
	schemas []string
	rel     map[string]relation // where each table and sequence is, by display name
}

// ident is the quoted, schema-qualified name of a relation of w, by its
// display name.
func (w *world) ident(name string) string { return w.rel[name].ident() }

func (k *checker[S]) run() {
	ctx := context.Background()
	k.baseline(ctx)
	phases := k.steps
	if k.c.Phases != nil {
		// The phases the clean execution reached: one that answered early
		// (idem.Answer) leaves the later ones for another request.
		phases = k.c.Phases()[:min(k.reached+1, len(k.c.Phases()))]
	}
	group := k.commitGroups(phases)
	k.completedRetry(ctx)
	for i, p := range phases {
		switch {
		case p.Foreign != nil:
			k.crash(ctx, fmt.Sprintf("crash in %s, before the other system acted", p.Name), p.Name, at{phase: i, where: atStart}, -1)
			k.crash(ctx, fmt.Sprintf("crash in %s, after the other system acted", p.Name), p.Name, at{phase: i, where: atEnd}, -1)
			if k.c.Handler != nil && i+1 < len(phases) && phases[i+1].Foreign == nil {
				// A handler's foreign step records its result at once.
				k.crash(ctx, fmt.Sprintf("crash right after %s was recorded", p.Name), p.Name, at{phase: i + 1, where: atStart}, -1)
			}
			k.takeover(ctx, i, p.Name)
		default:
			first := slices.Index(group, group[i])
			k.crash(ctx, fmt.Sprintf("crash inside %s, before its commit", p.Name), p.Name, at{phase: i, where: atEnd}, first)
			if i+1 < len(phases) && phases[i+1].Foreign == nil && group[i+1] != group[i] {
				// Only where a commit separates them (not in one claim's
				// transaction), and not before a foreign phase, where this
				// is that phase's "before the other system acted".
				k.crash(ctx, fmt.Sprintf("crash right after %s committed", p.Name), p.Name, at{phase: i + 1, where: atStart}, -1)
			}
		}
	}
	k.duplicates(ctx)
	if k.c.Invariant != nil {
		k.burst(ctx)
	}
	if k.c.Recorder != nil {
		k.c.Recorder.finish()
	}
}

// commitGroups numbers the phases by the transaction they commit in, as
// the engine runs them in the case's claim mode (idem.ClaimMode): in
// record-last mode all of them in one; in claim-first mode the local
// phases up to the first foreign one in the claim's, and each later one
// in its own; in separate mode each in its own.
func (k *checker[S]) commitGroups(phases []idem.Phase[S]) []int {
	mode := k.claimMode()
	local := !slices.ContainsFunc(phases, func(p idem.Phase[S]) bool { return p.Foreign != nil })
	group := make([]int, len(phases))
	for i := range phases {
		group[i] = i
	}
	shared := 0 // how many phases, from the first, share the claim's transaction
	switch {
	case k.c.Handler != nil:
		// A handler's final transaction is the claim's, but for a step,
		// before which the claim commits alone.
		if len(phases) == 1 && mode != idem.ClaimSeparate {
			shared = 1
		}
	case mode == idem.ClaimLast || mode == idem.ClaimAuto && local:
		shared = len(phases)
	case mode == idem.ClaimFirst || mode == idem.ClaimAuto:
		shared = slices.IndexFunc(phases, func(p idem.Phase[S]) bool { return p.Foreign != nil })
		if shared < 0 {
			shared = len(phases)
		}
	}
	for i := range shared {
		group[i] = 0
	}
	return group
}

// claimMode is the case's claim mode as the engine takes it: the
// operation's, or the engine's when the operation leaves it auto (an
// engine-wide ClaimLast is auto).
func (k *checker[S]) claimMode() idem.ClaimMode {
	mode := k.c.Operation.Policy.Claim
	if mode == idem.ClaimAuto && k.c.Options.Claim != idem.ClaimLast {
		mode = k.c.Options.Claim
	}
	return mode
}

// lastMode reports whether the engine runs the case in ClaimLast mode,
// whose claims read nothing before the phases: a handler only when the
// operation says last, phases also when auto finds them all local.
func (k *checker[S]) lastMode() bool {
	mode := k.claimMode()
	if k.c.Handler != nil {
		return mode == idem.ClaimLast
	}
	local := !slices.ContainsFunc(k.c.Phases(), func(p idem.Phase[S]) bool { return p.Foreign != nil })
	return mode == idem.ClaimLast || mode == idem.ClaimAuto && local
}

// begin starts a scenario on a world of its own.
func (k *checker[S]) begin(ctx context.Context, scenario string) *world {
	k.t.Helper()
	k.scenario = scenario
	if k.c.Recorder != nil {
		k.c.Recorder.setScenario(scenario)
	}
	opts := k.c.Options
	var env *Env
	w := &world{}
	if k.c.Migrate != nil {
		env = newEnv(k.t, opts, true)
	} else {
		env = newEnv(k.t, opts, false)
		w.schemas = []string{env.Schema}
	}
	w.env = env
	engineTables, _, err := listRelations(ctx, env.Pool, w.schemas, env.Schema, "r")
	if err != nil {
		k.t.Fatalf("idemtest.Check: %v", err)
	}
	engineSeqs, _, _ := listRelations(ctx, env.Pool, w.schemas, env.Schema, "S")
	if k.c.Migrate != nil {
		if err := k.c.Migrate(ctx, env.URL); err != nil {
			k.t.Fatalf("idemtest.Check %s: Migrate: %v", scenario, err)
		}
	}
	if k.c.Setup != nil {
		if err := k.c.Setup(ctx, env.Pool); err != nil {
			k.t.Fatalf("idemtest.Check %s: Setup: %v", scenario, err)
		}
	}
	tables, where, err := listRelations(ctx, env.Pool, w.schemas, env.Schema, "r")
	if err != nil {
		k.t.Fatalf("idemtest.Check: %v", err)
	}
	seqs, seqWhere, err := listRelations(ctx, env.Pool, w.schemas, env.Schema, "S")
	if err != nil {
		k.t.Fatalf("idemtest.Check: %v", err)
	}
	maps.Copy(where, seqWhere)
	w.tables = without(tables, engineTables)
	w.seqs = without(seqs, engineSeqs)
	w.rel = where
	return w
}

// end checks the invariant, takes what the recorder found, and closes the
// world's pool (but the baseline's, which the completed retry reuses).
func (k *checker[S]) end(ctx context.Context, w *world) {
	if k.c.Invariant != nil {
		if err := k.invariant(ctx, w); err != nil {
			k.add("", RuleInvariant, "%v", err)
		}
	}
	if k.c.Recorder != nil {
		k.findings = append(k.findings, k.c.Recorder.take()...)
	}
	if w != k.base {
		w.env.Pool.Close()
	}
}

func (k *checker[S]) add(phase string, rule Rule, format string, args ...any) {
	k.findings = append(k.findings, Finding{Scenario: k.scenario, Phase: phase, Rule: rule, Detail: fmt.Sprintf(format, args...)})
}

// baseline runs the clean execution whose rows and answer every other
// scenario is compared with.
func (k *checker[S]) baseline(ctx context.Context) {
	w := k.begin(ctx, "clean execution")
	var mu sync.Mutex
	out, err := k.exec(ctx, w, k.req, hooks{start: func(i int, name string) {
		mu.Lock()
		defer mu.Unlock()
		k.reached = max(k.reached, i)
		if k.c.Handler == nil || i != len(k.steps) {
			return
		}
		// A step's start has its kind; the final transaction's is the
		// handler's name.
		k.steps = append(k.steps, idem.Phase[S]{Name: name})
	}, foreign: func(i int) { // after start, which added step i
		mu.Lock()
		defer mu.Unlock()
		if k.c.Handler != nil && i < len(k.steps) {
			k.steps[i].Foreign = func(context.Context, string, *S) error { return nil }
		}
	}})
	if err != nil {
		k.t.Fatalf("idemtest.Check %s: the clean execution failed: %v (Check needs a request that the operation accepts, and a Setup that makes what it needs)", k.c.Operation.ID, err)
	}
	if k.c.Handler != nil {
		for i := range k.steps {
			if k.steps[i].Foreign == nil {
				k.steps[i].Local = func(context.Context, pgx.Tx, *S) error { return nil }
			}
		}
		if n := len(k.steps); n == 0 || k.steps[n-1].Foreign != nil {
			k.steps = append(k.steps, idem.Phase[S]{Name: "handler"})
		}
		last := len(k.steps) - 1
		k.steps[last].Local, k.steps[last].Final = nil, func(context.Context, pgx.Tx, *S) (*idem.Response, error) { return nil, nil }
	}
	k.base, k.baseResp = w, out.Response
	k.baseRows = k.rows(ctx, w, false)
	k.baseRenumbered = k.rows(ctx, w, true)
	k.end(ctx, w)
}

// completedRetry sends the key again once it is complete: nothing it
// does may remain, and the stored answer comes back. No phase may run,
// but in last mode, where the engine reads nothing before the phases
// (unless its recent claims found keys held often): they run, the
// record's insert finds the key held, and all of it rolls back.
func (k *checker[S]) completedRetry(ctx context.Context) {
	k.scenario = "retry of the completed key"
	if k.c.Recorder != nil {
		k.c.Recorder.setScenario(k.scenario)
	}
	var ran []string
	var mu sync.Mutex
	h := hooks{start: func(_ int, name string) {
		mu.Lock()
		ran = append(ran, name)
		mu.Unlock()
	}}
	out, err := k.exec(ctx, k.base, k.req, h)
	switch {
	case err != nil:
		k.add("", RuleFailed, "the retry failed: %v", err)
	case len(ran) > 0 && !k.lastMode():
		k.add(ran[0], RuleOnce, "phases %v ran again for a completed key", ran)
	case !out.Replayed:
		k.add("", RuleOnce, "the retry was not answered with the stored response")
	case len(k.c.Operation.Policy.Render) > 0:
		if d := diffRendered(k.baseResp, out.Response, k.c.Operation.Policy.ReplayHeaders, k.c.Operation.Policy.Render); d != "" {
			k.add("", RuleResponse, "%s", d)
		}
	default:
		k.sameResponse("", out.Response)
	}
	k.sameRows(ctx, k.base, "")
	k.end(ctx, k.base)
	k.base.env.Pool.Close()
}

// crash runs an execution that dies at the point given, then retries it
// to completion, and compares with the baseline. For a crash inside a
// local phase before its commit, first is the first phase of the
// transaction it commits in: everything that transaction wrote rolls back,
// and what was there before its first phase ran is what must remain.
func (k *checker[S]) crash(ctx context.Context, scenario, phase string, point at, first int) {
	w := k.begin(ctx, scenario)
	defer k.end(ctx, w)
	var seqs map[string]seqState
	var before rows
	// The rows, and the sequences, as they were before the transaction
	// began: it rolls back, but what nextval handed out does not, and a
	// retry would answer with other ids than the baseline's. Read here, on
	// the test's goroutine, never from inside the execution (whose
	// transaction may hold locks the read would wait for).
	snapshot := func() { seqs, before = k.sequences(ctx, w), k.rows(ctx, w, false) }
	if first == 0 {
		snapshot()
	}
	atFirst, resume := make(chan struct{}), make(chan struct{})
	reached := false
	die := func(i int, _ string) {
		if i == point.phase {
			reached = true
			runtime.Goexit()
		}
	}
	h := hooks{start: die}
	if point.where == atEnd {
		h = hooks{end: die}
		if first > 0 {
			h.start = func(i int, _ string) {
				if i == first {
					atFirst <- struct{}{}
					<-resume
				}
			}
		}
	}
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		_, runErr = k.exec(ctx, w, k.req, h)
	}()
	if first > 0 {
		select {
		case <-atFirst:
			snapshot()
			close(resume)
		case <-done:
		}
	}
	if !k.wait(done, "the execution") {
		return
	}
	if !reached {
		k.add(phase, RuleFailed, "the execution ended before the crash point, with %v", runErr)
		return
	}
	if before != nil {
		// The transaction rolled back: whatever went through it is gone.
		// What is left was written through something else.
		if d := k.rows(ctx, w, false).diff(before, "before the transaction it had"); d != "" {
			k.add(phase, RuleRows, "writes outlived the phase's rolled-back transaction (a write through something other than its tx, which a retry makes again): %s", d)
			return
		}
		k.restoreSequences(ctx, w, seqs)
	}
	out, err := k.retry(ctx, w)
	if err != nil {
		k.add(phase, RuleFailed, "the retry after the crash failed: %v", err)
		return
	}
	k.sameResponse(phase, out.Response)
	k.sameRows(ctx, w, phase)
}

// scenarioTimeout bounds how long Check waits for an execution.
const scenarioTimeout = 2 * time.Minute

// wait waits for done, or reports that what did not end in time (a phase
// that blocks: a fake that never answers, a lock wait).
func (k *checker[S]) wait(done <-chan struct{}, what string) bool {
	select {
	case <-done:
		return true
	case <-time.After(scenarioTimeout):
		k.add("", RuleFailed, "%s did not end within %s: a phase blocks (a fake that never answers, a lock it waits for)", what, scenarioTimeout)
		return false
	}
}

// takeover lets the execution hang in foreign phase i after the other
// system acted, past its lease: a retry takes the key over and completes,
// then the stale owner wakes up and must commit nothing.
func (k *checker[S]) takeover(ctx context.Context, i int, phase string) {
	w := k.begin(ctx, fmt.Sprintf("takeover while %s hangs past the lease", phase))
	defer k.end(ctx, w)
	acted, wake := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := hooks{end: func(j int, _ string) {
		if j == i {
			once.Do(func() { close(acted) })
			<-wake
		}
	}}
	done := make(chan struct{})
	var staleOut *idem.Outcome
	var staleErr error
	go func() {
		defer close(done)
		staleOut, staleErr = k.exec(ctx, w, k.req, h)
	}()
	select {
	case <-acted:
	case <-done:
		k.add(phase, RuleFailed, "the execution ended before %s returned, with %v", phase, staleErr)
		return
	case <-time.After(scenarioTimeout):
		k.add(phase, RuleFailed, "the execution did not reach the end of %s within %s", phase, scenarioTimeout)
		return
	}
	out, err := k.retry(ctx, w)
	close(wake)
	if !k.wait(done, "the stale owner") {
		return
	}
	if err != nil {
		k.add(phase, RuleFailed, "the retry that takes the key over failed: %v", err)
		return
	}
	if staleErr == nil && !staleOut.Replayed {
		k.add(phase, RuleFencing, "the owner whose lease expired completed the execution after another had taken it over")
	}
	k.sameResponse(phase, out.Response)
	k.sameRows(ctx, w, phase)
}

// duplicates sends Concurrency copies of the request at once.
func (k *checker[S]) duplicates(ctx context.Context) {
	w := k.begin(ctx, fmt.Sprintf("%d concurrent duplicates", k.c.Concurrency))
	defer k.end(ctx, w)
	// A duplicate answered 409, or released (its phases met the others'
	// locks before any effect: a release frees the key, and a client sends
	// it again), is sent again, as a client would, until it gets the key's
	// answer.
	outs, errs := k.concurrently(ctx, w, func(int) idem.KeyedRequest { return k.req }, func(err error) bool {
		return inFlight(err) || idem.Released(err) != nil
	})
	executed := 0
	var first *idem.Response
	for i, out := range outs {
		if errs[i] != nil {
			k.add("", RuleFailed, "duplicate %d failed: %v", i, errs[i])
			continue
		}
		if !out.Replayed {
			executed++
		}
		switch {
		case first == nil:
			first = out.Response
		case len(k.c.Operation.Policy.Render) > 0 && out.Replayed:
			if d := diffRendered(first, out.Response, k.c.Operation.Policy.ReplayHeaders, k.c.Operation.Policy.Render); d != "" {
				k.add("", RuleResponse, "a duplicate's rendered replay differs from the answer: %s", d)
			}
		default:
			if d := diffResponse(first, out.Response, k.c.Operation.Policy.ReplayHeaders, k.c.VolatileResponse); d != "" {
				k.add("", RuleResponse, "two duplicates were answered differently: %s", d)
			}
		}
	}
	if executed != 1 {
		k.add("", RuleOnce, "%d of the duplicates executed; want 1", executed)
	}
	got := k.rows(ctx, w, false)
	if got.diff(k.baseRows, cleanLeft) == "" {
		if first != nil {
			k.sameResponse("", first)
		}
		return
	}
	// Duplicates that ran their phases and rolled back (ClaimLast) took
	// values from the sequences: the winner's ids may differ from the
	// baseline's. Compared with ids numbered by their order instead, and
	// the answer, which holds those ids, by its status.
	if d := k.rows(ctx, w, true).diff(k.baseRenumbered, cleanLeft); d != "" {
		k.add("", RuleRows, "%s", d)
	}
	if first != nil && first.Status != k.baseResp.Status {
		k.add("", RuleResponse, "status %d; the clean execution answered %d", first.Status, k.baseResp.Status)
	}
}

// burst sends Concurrency requests under different keys at once, checking
// the invariant after them: what two intents on one resource need besides
// their keys (a lock, a constraint read after the lock). A race shows only
// sometimes, so it does so a few rounds, each from what Setup makes.
func (k *checker[S]) burst(ctx context.Context) {
	const rounds = 8
	for r := range rounds {
		w := k.begin(ctx, fmt.Sprintf("%d concurrent requests under different keys", k.c.Concurrency))
		warm(ctx, w.env.Pool, k.c.Concurrency)
		_, errs := k.concurrently(ctx, w, func(i int) idem.KeyedRequest {
			req := k.req
			req.Key = fmt.Sprintf("%s-burst-%d", k.req.Key, i)
			return req
		}, inFlight)
		for i, err := range errs {
			// A release (out of stock, try later) is an answer too; only
			// the invariant matters here.
			if err != nil && idem.Released(err) == nil {
				k.add("", RuleFailed, "request %d of round %d failed: %v", i, r+1, err)
			}
		}
		err := k.invariant(ctx, w)
		if err != nil {
			k.add("", RuleInvariant, "after round %d of %d: %v", r+1, rounds, err)
		}
		if k.c.Recorder != nil {
			k.findings = append(k.findings, k.c.Recorder.take()...)
		}
		w.env.Pool.Close()
		if err != nil {
			return
		}
	}
}

// warm opens n connections of pool, so that n requests sent at once start
// at once instead of one connection's setup apart.
func warm(ctx context.Context, pool *pgxpool.Pool, n int) {
	n = min(n, int(pool.Config().MaxConns))
	conns := make([]*pgxpool.Conn, 0, n)
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

// concurrently runs Concurrency executions at once, each with a request
// of its own, sending again those whose error again says a client would
// retry (409 in flight) until they are answered otherwise or a minute
// passes.
func (k *checker[S]) concurrently(ctx context.Context, w *world, req func(int) idem.KeyedRequest, again func(error) bool) ([]*idem.Outcome, []error) {
	n := k.c.Concurrency
	outs, errs := make([]*idem.Outcome, n), make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			deadline := time.Now().Add(time.Minute)
			for {
				outs[i], errs[i] = k.exec(ctx, w, req(i), hooks{})
				if !again(errs[i]) || time.Now().After(deadline) {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	if !k.wait(done, "the concurrent executions") {
		for i := range errs {
			if outs[i] == nil && errs[i] == nil {
				errs[i] = errors.New("did not end")
			}
		}
	}
	return outs, errs
}

// retry runs the request again after a crash or a hang: the dead owner's
// lease is expired (as time would), and a retry answered 409 because the
// owner renewed it meanwhile tries again.
func (k *checker[S]) retry(ctx context.Context, w *world) (*idem.Outcome, error) {
	for attempt := 0; ; attempt++ {
		if _, err := w.env.Pool.Exec(ctx, `UPDATE `+pgx.Identifier{w.env.Schema, "records"}.Sanitize()+
			` SET lease_until = now() - interval '1 second' WHERE owner_token IS NOT NULL`); err != nil {
			return nil, fmt.Errorf("expiring the lease: %w", err)
		}
		out, err := k.exec(ctx, w, k.req, hooks{})
		if !inFlight(err) || attempt == 20 {
			return out, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cleanLeft names the baseline's rows in a diff.
const cleanLeft = "the clean execution left"

func inFlight(err error) bool {
	var e *idem.Error
	return errors.As(err, &e) && e.Kind == idemtype.KindInFlight
}

func (k *checker[S]) invariant(ctx context.Context, w *world) error {
	tx, err := w.env.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	return k.c.Invariant(ctx, tx)
}

func (k *checker[S]) sameResponse(phase string, got *idem.Response) {
	if d := diffResponse(k.baseResp, got, k.c.Operation.Policy.ReplayHeaders, k.c.VolatileResponse); d != "" {
		k.add(phase, RuleResponse, "%s", d)
	}
}

func (k *checker[S]) sameRows(ctx context.Context, w *world, phase string) {
	if d := k.rows(ctx, w, false).diff(k.baseRows, cleanLeft); d != "" {
		k.add(phase, RuleRows, "%s", d)
	}
}

// at is a crash point: at the start of a phase (after the commit of the
// one before), or at its end (a local phase's body returned, before its
// commit; a foreign phase's call returned, its result not yet saved).
type at struct {
	phase int
	where int
}

const (
	atStart = iota
	atEnd
)

// hooks are called around each phase's body, with its index and name.
type hooks struct {
	start   func(i int, name string)
	end     func(i int, name string) // only after a body that returned no error
	foreign func(i int)              // a handler's step i is foreign (before start)
}

// exec runs the case's request once on w's engine, its phases or its
// handler wrapped with h.
func (k *checker[S]) exec(ctx context.Context, w *world, req idem.KeyedRequest, h hooks) (*idem.Outcome, error) {
	if k.c.Handler == nil {
		return idem.Run(ctx, w.env.Engine, k.c.Operation, req, k.phases(h))
	}
	rec := k.c.Recorder
	var key string // the foreign step's running now
	sh := &stephook.Hooks{
		Start: func(i int, name, stepKey string) {
			if h.start != nil {
				h.start(i, name)
			}
			if stepKey != "" {
				if h.foreign != nil {
					h.foreign(i)
				}
				if rec != nil {
					key = stepKey
					rec.enter(key, name)
				}
			}
		},
		Done: func(int, string) {
			if key != "" {
				rec.exit(key)
				key = ""
			}
		},
		End: func(i int, name string) {
			if h.end != nil {
				h.end(i, name)
			}
		},
	}
	return idem.RunHandler(stephook.With(ctx, sh), w.env.Engine, k.c.Operation, req, k.c.Handler())
}

// phases returns a fresh set of the case's phases wrapped with h, and
// with what the recorder needs to know of foreign phases.
func (k *checker[S]) phases(h hooks) []idem.Phase[S] {
	ps := k.c.Phases()
	out := make([]idem.Phase[S], len(ps))
	rec := k.c.Recorder
	for i, p := range ps {
		start := func() {
			if h.start != nil {
				h.start(i, p.Name)
			}
		}
		end := func() {
			if h.end != nil {
				h.end(i, p.Name)
			}
		}
		q := idem.Phase[S]{Name: p.Name}
		switch {
		case p.Local != nil:
			q.Local = func(ctx context.Context, tx pgx.Tx, st *S) error {
				start()
				err := p.Local(ctx, tx, st)
				if err == nil || idem.Answered(err) != nil {
					end() // an answer is the phase's success
				}
				return err
			}
		case p.Final != nil:
			q.Render = p.Render // runs for replays only: no crash point
			q.Final = func(ctx context.Context, tx pgx.Tx, st *S) (*idem.Response, error) {
				start()
				resp, err := p.Final(ctx, tx, st)
				if err != nil {
					return resp, err
				}
				end()
				return resp, nil
			}
		case p.Foreign != nil:
			q.Foreign = func(ctx context.Context, key string, st *S) error {
				start()
				if rec != nil {
					rec.enter(key, p.Name)
					defer rec.exit(key)
				}
				err := p.Foreign(ctx, key, st)
				if err == nil || idem.Answered(err) != nil {
					end()
				}
				return err
			}
		}
		out[i] = q
	}
	return out
}

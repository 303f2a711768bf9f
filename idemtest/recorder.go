package idemtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Recorder is told by the fakes of other systems what each request they
// get carries, so that Check can hold a case's foreign phases to their
// contract: every attempt of one foreign call (one derived key) in a
// scenario sends the same parameters, and sends the key the phase was
// given. A fake calls Call from wherever it receives the request (an
// httptest handler, a client double).
//
// A Recorder is safe for concurrent use. It serves one Check at a time:
// before its first scenario and after its last it records nothing.
type Recorder struct {
	mu       sync.Mutex
	scenario string
	given    map[string]string    // derived key -> the foreign phase given it
	running  map[string]int       // foreign phases running now, by name
	first    map[scenarioKey]sent // derived key in a scenario -> its first call
	reported map[string]bool      // derived key or phase -> already reported
	found    []Finding
}

type sent struct {
	params   []byte
	scenario string
}

// scenarioKey is a derived key in one scenario: every scenario runs the
// local phases anew, and may store other values for its foreign call to
// send (a reference the phase generated), so attempts are compared within
// a scenario, where a resumed call must send what the first one did.
type scenarioKey struct{ scenario, key string }

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// Call records that the other system received a request under key with
// params: anything JSON-encodable that says what the request asks (the
// body the fake decoded, or the call's arguments).
func (r *Recorder) Call(key string, params any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.given == nil {
		return
	}
	b, err := json.Marshal(params)
	if err != nil {
		r.report("params:"+key, "", RuleForeignParams, "the parameters given to Recorder.Call cannot be encoded as JSON: %v", err)
		return
	}
	phase, ok := r.given[key]
	if !ok {
		running := slices.Sorted(maps.Keys(r.running))
		if len(running) == 0 {
			return // not a call a foreign phase made: not the check's to judge
		}
		name := strings.Join(running, ", ")
		r.report("key:"+name, name, RuleForeignKey,
			"the other system got key %q, not the key the phase was given: send key (it is the same on every attempt), or a resumed call is a second %s", key, what(b))
		return
	}
	first, seen := r.first[scenarioKey{r.scenario, key}]
	if !seen {
		r.first[scenarioKey{r.scenario, key}] = sent{params: b, scenario: r.scenario}
		return
	}
	if d := diffJSON(first.params, b); d != nil {
		r.report("params:"+key, phase, RuleForeignParams,
			"key %s was sent with %s on its first attempt and with %s on a later one: compute what the call sends from state saved by an earlier local phase, not from the clock, randomness or a fresh read, so that every attempt sends the same", key, d.first, d.now)
	}
}

// what names a request for a message: its parameters, clipped.
func what(params []byte) string {
	if len(params) > 120 {
		return "request " + string(params[:120]) + "..."
	}
	return "request " + string(params)
}

func (r *Recorder) report(once, phase string, rule Rule, format string, args ...any) {
	if r.reported[once] {
		return
	}
	r.reported[once] = true
	r.found = append(r.found, Finding{Scenario: r.scenario, Phase: phase, Rule: rule, Detail: fmt.Sprintf(format, args...)})
}

// setScenario starts recording for a scenario of Check's.
func (r *Recorder) setScenario(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.given == nil {
		r.given, r.running, r.first, r.reported = map[string]string{}, map[string]int{}, map[scenarioKey]sent{}, map[string]bool{}
	}
	r.scenario = s
}

// finish ends the recorder's check: it records nothing more until the
// next one begins.
func (r *Recorder) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.given, r.running, r.first, r.reported, r.scenario = nil, nil, nil, nil, ""
}

// enter says that phase is about to call the other system with key.
func (r *Recorder) enter(key, phase string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.given == nil {
		return
	}
	r.given[key] = phase
	r.running[phase]++
}

// exit says that the phase given key returned.
func (r *Recorder) exit(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.given == nil {
		return
	}
	phase := r.given[key]
	if r.running[phase]--; r.running[phase] <= 0 {
		delete(r.running, phase)
	}
}

// take returns what the recorder found since it was last asked.
func (r *Recorder) take() []Finding {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.found
	r.found = nil
	return f
}

// jsonDiff is where two JSON documents first differ: what the first had
// there, and what the second has.
type jsonDiff struct{ first, now string }

// diffJSON says where b first differs from a ("field /amount = 1000" and
// "field /amount = 1017"); nil when they are equal as JSON.
func diffJSON(a, b []byte) *jsonDiff {
	var va, vb any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&va) != nil || db.Decode(&vb) != nil {
		if bytes.Equal(a, b) {
			return nil
		}
		return &jsonDiff{string(a), string(b)}
	}
	return walk("", va, vb)
}

func walk(path string, a, b any) *jsonDiff {
	ma, aok := a.(map[string]any)
	mb, bok := b.(map[string]any)
	if aok && bok {
		keys := slices.Sorted(maps.Keys(ma))
		for _, k := range slices.Sorted(maps.Keys(mb)) {
			if _, ok := ma[k]; !ok {
				keys = append(keys, k)
			}
		}
		for _, k := range keys {
			p := path + "/" + idemtype.EscapePointerToken(k)
			va, ina := ma[k]
			vb, inb := mb[k]
			if !ina || !inb {
				return &jsonDiff{describe(p, va, ina), describe(p, vb, inb)}
			}
			if d := walk(p, va, vb); d != nil {
				return d
			}
		}
		return nil
	}
	la, aok := a.([]any)
	lb, bok := b.([]any)
	if aok && bok && len(la) == len(lb) {
		for i := range la {
			if d := walk(fmt.Sprintf("%s/%d", path, i), la[i], lb[i]); d != nil {
				return d
			}
		}
		return nil
	}
	if reflect.DeepEqual(a, b) {
		return nil
	}
	return &jsonDiff{describe(path, a, true), describe(path, b, true)}
}

// describe says what a document holds at path.
func describe(path string, v any, present bool) string {
	switch {
	case !present:
		return "no field " + path
	case path == "":
		s, _ := json.Marshal(v)
		return string(s)
	}
	s, _ := json.Marshal(v)
	return "field " + path + " = " + string(s)
}

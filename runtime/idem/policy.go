package idem

import (
	"fmt"
	"net/http"
	"time"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Policy is the per-operation idempotency policy, as declared in the
// operation's x-idempotency extension.
type Policy struct {
	Retention     time.Duration      // how long a key is remembered; must exceed Lease
	Lease         time.Duration      // how long a claim is exclusive without refresh
	Ambiguous     idemtype.Ambiguous // default resume
	Complete      idemtype.Complete  // default on-retry
	ReplayHeaders []string           // response headers stored and replayed (besides none)
	MaxReplayBody int                // response bodies above this many bytes are not stored
	// Render, when set, stores a compact answer instead of the response:
	// its status, its replay headers, and the values at these JSON
	// Pointers of its body (the resource's identifiers). A replay renders
	// the representation again from them (the final Phase's Render, in a
	// read-only transaction). MaxReplayBody then does not apply.
	Render []string
	// Claim says when the execution's record is written; see ClaimMode.
	Claim ClaimMode
	// Wait is how long a duplicate that finds its key held by an execution
	// in flight waits for that execution's answer before it is answered
	// 409 with Retry-After (0: DefaultWait; NoWait: not at all; at most
	// MaxWait). A client's Prefer: wait=N may shorten it.
	Wait time.Duration
}

// ClaimMode says when an execution writes its record, relative to its
// local phases. docs/runtime.md compares the modes and their costs.
type ClaimMode string

const (
	// ClaimAuto, the default, is ClaimLast for an operation whose phases are
	// all local and ClaimFirst for one with a foreign phase.
	ClaimAuto ClaimMode = ""
	// ClaimLast runs the phases first, in one transaction, and inserts the
	// completed record at its end, just before its commit. A concurrent
	// duplicate runs the phases too, finds the key taken when it inserts
	// the record, rolls back and replays the winner's answer. Only for
	// operations whose phases are all local.
	ClaimLast ClaimMode = "last"
	// ClaimFirst inserts the claim in the transaction of the local phases up
	// to the first foreign one (or alone, when a foreign phase comes first):
	// a concurrent duplicate waits on it (Options.ClaimWait) and replays, or
	// answers 409. Choose it for all-local phases too costly to run twice.
	// The uncommitted claim cannot be renewed, so its transaction is bounded
	// by the lease.
	ClaimFirst ClaimMode = "first"
	// ClaimSeparate commits the claim on its own before the first phase
	// runs (one commit more). Choose it when a local phase may run longer
	// than the lease: a committed claim is renewed while it runs.
	ClaimSeparate ClaimMode = "separate"
)

// defaultReplayHeaders are stored and replayed when a policy names none
// (idemtype.DefaultReplayHeaders).
var defaultReplayHeaders = idemtype.DefaultReplayHeaders()

// Operation identifies an idempotent operation and its policy.
type Operation struct {
	ID        string // the OpenAPI operationId
	Namespace string // the key namespace: the group name, or ID when empty
	Policy    Policy
}

func (op *Operation) namespace() string {
	if op.Namespace != "" {
		return op.Namespace
	}
	return op.ID
}

// withDefaults returns the policy with zero fields set to their defaults.
func (p Policy) withDefaults() Policy {
	if p.Retention == 0 {
		p.Retention = idemtype.DefaultRetention
	}
	if p.Lease == 0 {
		p.Lease = idemtype.DefaultLease
	}
	if p.Ambiguous == "" {
		p.Ambiguous = idemtype.AmbiguousResume
	}
	if p.Complete == "" {
		p.Complete = idemtype.CompleteOnRetry
	}
	if p.ReplayHeaders == nil {
		p.ReplayHeaders = defaultReplayHeaders
	}
	if p.MaxReplayBody == 0 {
		p.MaxReplayBody = idemtype.DefaultMaxReplayBody
	}
	return p
}

// MaxLease is the longest lease a policy may have (idemtype.MaxLease).
const MaxLease = idemtype.MaxLease

// validate reports a policy that cannot be honoured.
func (p Policy) validate() error {
	p = p.withDefaults()
	_, ambiguousErr := idemtype.ParseAmbiguous(string(p.Ambiguous))
	_, completeErr := idemtype.ParseComplete(string(p.Complete))
	switch {
	case p.Lease < time.Second:
		return fmt.Errorf("lease %v is shorter than 1s", p.Lease)
	case p.Lease > MaxLease:
		return fmt.Errorf("lease %v is longer than the longest lease, %v: PostgreSQL's statement_timeout, which bounds a claim's open transaction by the lease, cannot hold more", p.Lease, MaxLease)
	case p.Retention <= p.Lease:
		return fmt.Errorf("retention %v must be longer than lease %v", p.Retention, p.Lease)
	case ambiguousErr != nil:
		return ambiguousErr
	case completeErr != nil:
		return completeErr
	case p.Claim != ClaimAuto && p.Claim != ClaimLast && p.Claim != ClaimFirst && p.Claim != ClaimSeparate:
		return fmt.Errorf("claim %q is not one of last, first, separate", p.Claim)
	case p.Wait < NoWait:
		return fmt.Errorf("wait %v is negative; NoWait (%v) does not wait", p.Wait, NoWait)
	case p.Wait > MaxWait:
		return fmt.Errorf("wait %v is longer than the longest wait, %v", p.Wait, MaxWait)
	case p.MaxReplayBody < 0:
		return fmt.Errorf("maxBodyBytes %d is negative", p.MaxReplayBody)
	}
	for _, ptr := range p.Render {
		if err := idemtype.CheckPointer(ptr); err != nil {
			return fmt.Errorf("render: %w", err)
		}
	}
	for _, h := range p.ReplayHeaders {
		if idemtype.FramingHeader(h) {
			return fmt.Errorf("replay header %s describes the body's framing, which the server sets for each response; it cannot be stored", h)
		}
	}
	return nil
}

// storedHeaders keeps the headers the policy allows to be stored.
// The values are copied, all into one array, so that the stored response
// shares nothing with the phase's.
func (p Policy) storedHeaders(h http.Header) http.Header {
	out := http.Header{}
	n := 0
	for _, name := range p.ReplayHeaders {
		n += len(h[http.CanonicalHeaderKey(name)])
	}
	values := make([]string, 0, n)
	for _, name := range p.ReplayHeaders {
		name = http.CanonicalHeaderKey(name)
		if idemtype.CredentialHeader(name) {
			continue
		}
		if v, ok := h[name]; ok {
			start := len(values)
			values = append(values, v...)
			out[name] = values[start:len(values):len(values)]
		}
	}
	return out
}

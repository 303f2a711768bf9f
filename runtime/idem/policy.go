package idem

import (
	"fmt"
	"net/http"
	"time"
)

// Ambiguous says what happens when an execution fails after it may have had
// effects (a local phase committed, or a foreign call was attempted).
type Ambiguous string

const (
	// AmbiguousResume keeps the record claimed at its recovery point and
	// gives up the lease, so a retry with the same key continues from there.
	AmbiguousResume Ambiguous = "resume"
	// AmbiguousStore stores the 500 response and replays it (Stripe v1).
	AmbiguousStore Ambiguous = "store"
)

// Complete says who finishes an execution its owner abandoned.
type Complete string

const (
	// CompleteOnRetry leaves abandoned executions to the client's retry.
	CompleteOnRetry Complete = "on-retry"
	// CompleteBackground also lets the completer finish them from the
	// stored request, without a retry.
	CompleteBackground Complete = "background"
)

// Policy is the per-operation idempotency policy, as declared in the
// operation's x-idempotency extension.
type Policy struct {
	Retention     time.Duration // how long a key is remembered; must exceed Lease
	Lease         time.Duration // how long a claim is exclusive without refresh
	Ambiguous     Ambiguous
	Complete      Complete
	ReplayHeaders []string // response headers stored and replayed (besides none)
	MaxReplayBody int      // response bodies above this many bytes are not stored
	// Claim says when the execution's record is written; see ClaimMode.
	Claim ClaimMode
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

// Default policy values, as documented for the x-idempotency extension.
const (
	DefaultRetention     = 24 * time.Hour
	DefaultLease         = 30 * time.Second
	DefaultMaxReplayBody = 64 << 10
)

// DefaultReplayHeaders are stored and replayed when a policy names none.
var DefaultReplayHeaders = []string{"Content-Type", "Location"}

// neverStored are response headers that are never stored, whatever a policy
// lists: they carry credentials or per-client state.
var neverStored = map[string]bool{
	"Set-Cookie": true, "Authorization": true, "Proxy-Authorization": true,
	"Www-Authenticate": true, "Proxy-Authenticate": true, "Cookie": true,
}

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
		p.Retention = DefaultRetention
	}
	if p.Lease == 0 {
		p.Lease = DefaultLease
	}
	if p.Ambiguous == "" {
		p.Ambiguous = AmbiguousResume
	}
	if p.Complete == "" {
		p.Complete = CompleteOnRetry
	}
	if p.ReplayHeaders == nil {
		p.ReplayHeaders = DefaultReplayHeaders
	}
	if p.MaxReplayBody == 0 {
		p.MaxReplayBody = DefaultMaxReplayBody
	}
	return p
}

// Validate reports a policy that cannot be honoured.
func (p Policy) Validate() error {
	p = p.withDefaults()
	switch {
	case p.Lease < time.Second:
		return fmt.Errorf("lease %v is shorter than 1s", p.Lease)
	case p.Retention <= p.Lease:
		return fmt.Errorf("retention %v must be longer than lease %v", p.Retention, p.Lease)
	case p.Ambiguous != AmbiguousResume && p.Ambiguous != AmbiguousStore:
		return fmt.Errorf("ambiguous %q is not one of resume, store", p.Ambiguous)
	case p.Complete != CompleteOnRetry && p.Complete != CompleteBackground:
		return fmt.Errorf("complete %q is not one of on-retry, background", p.Complete)
	case p.Claim != ClaimAuto && p.Claim != ClaimLast && p.Claim != ClaimFirst && p.Claim != ClaimSeparate:
		return fmt.Errorf("claim %q is not one of last, first, separate", p.Claim)
	case p.MaxReplayBody < 0:
		return fmt.Errorf("maxBodyBytes %d is negative", p.MaxReplayBody)
	}
	for _, h := range p.ReplayHeaders {
		if FramingHeader(h) {
			return fmt.Errorf("replay header %s describes the body's framing, which the server sets for each response; it cannot be stored", h)
		}
	}
	return nil
}

// framingHeaders describe how one response's body is framed on the wire. The
// server computes them for each response: a stored copy would contradict
// the body actually sent.
var framingHeaders = map[string]bool{"Content-Length": true, "Transfer-Encoding": true, "Content-Encoding": true}

// FramingHeader reports whether name is a framing header (Content-Length,
// Transfer-Encoding, Content-Encoding), which a policy may not replay.
func FramingHeader(name string) bool { return framingHeaders[http.CanonicalHeaderKey(name)] }

// storedHeaders keeps the headers the policy allows to be stored.
func (p Policy) storedHeaders(h http.Header) http.Header {
	out := http.Header{}
	for _, name := range p.ReplayHeaders {
		name = http.CanonicalHeaderKey(name)
		if neverStored[name] {
			continue
		}
		if v, ok := h[name]; ok {
			out[name] = append([]string(nil), v...)
		}
	}
	return out
}

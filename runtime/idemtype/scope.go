package idemtype

import (
	"fmt"
	"strings"
)

// ScopeKind says what an operation's keys are unique within, besides the
// operation (or its group).
type ScopeKind string

// The scope kinds.
const (
	// ScopePrincipal scopes keys to the authenticated caller.
	ScopePrincipal ScopeKind = "principal"
	// ScopeGlobal shares one key space among all callers.
	ScopeGlobal ScopeKind = "global"
	// ScopeHeader scopes keys to the value of a request header.
	ScopeHeader ScopeKind = "header"
	// ScopeSender scopes keys to a signed sender, verified by a named
	// verifier.
	ScopeSender ScopeKind = "sender"
)

func (k ScopeKind) String() string { return string(k) }

// Scope is a parsed x-idempotency scope: its kind and, for ScopeHeader and
// ScopeSender, a name. The runtime takes a Scope as it is, without parsing
// anything per request; the zero Scope is treated as ScopePrincipal.
type Scope struct {
	Kind ScopeKind
	// Name is the header's name for ScopeHeader, the verifier's name for
	// ScopeSender, and "" otherwise.
	Name string
}

// ParseScope parses a scope as the extension writes it: "principal",
// "global", "header:<Header-Name>" or "sender:<name>". A header name is an
// RFC 9110 token; a sender name is as ValidName says.
func ParseScope(s string) (Scope, error) {
	switch {
	case s == string(ScopePrincipal) || s == string(ScopeGlobal):
		return Scope{Kind: ScopeKind(s)}, nil
	case strings.HasPrefix(s, "header:") && ValidHeaderName(s[len("header:"):]):
		return Scope{Kind: ScopeHeader, Name: s[len("header:"):]}, nil
	case strings.HasPrefix(s, "sender:") && ValidName(s[len("sender:"):]):
		return Scope{Kind: ScopeSender, Name: s[len("sender:"):]}, nil
	}
	return Scope{}, fmt.Errorf("%q is not a scope; use principal, global, header:<Header-Name> or sender:<name>", s)
}

// String returns the scope as the extension writes it, which ParseScope
// reads back.
func (s Scope) String() string {
	switch s.Kind {
	case ScopeHeader, ScopeSender:
		return string(s.Kind) + ":" + s.Name
	case "":
		return string(ScopePrincipal)
	}
	return string(s.Kind)
}

// ValidHeaderName reports whether name is an HTTP field name: a non-empty
// RFC 9110 token.
func ValidHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return false
		}
	}
	return true
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// ValidName reports whether name may name a key group or a sender's
// verifier: a letter, then letters, digits, _ . or -, at most 63 in all.
func ValidName(name string) bool {
	if name == "" || len(name) > 63 || !isLetter(name[0]) {
		return false
	}
	for i := 1; i < len(name); i++ {
		c := name[i]
		if !isLetter(c) && !('0' <= c && c <= '9') && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

package idemtype

import (
	"fmt"
	"strings"
	"unicode/utf8"
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
	// ScopePath scopes keys to the value of a path parameter (the tenant
	// of /tenants/{tenant}/jobs).
	ScopePath ScopeKind = "path"
)

func (k ScopeKind) String() string { return string(k) }

// Scope is a parsed x-idempotency scope: its kind and, for ScopeHeader,
// ScopePath and ScopeSender, a name. The runtime takes a Scope as it is,
// without parsing anything per request; the zero Scope is treated as
// ScopePrincipal.
type Scope struct {
	Kind ScopeKind
	// Name is the header's name for ScopeHeader, the path parameter's for
	// ScopePath, the verifier's name for ScopeSender, and "" otherwise.
	Name string
	// Principal, for ScopeHeader and ScopePath only, scopes keys to the
	// authenticated caller as well ("principal+path:tenant"): the scope
	// value is both, each percent-encoded, joined by "/".
	Principal bool
}

// ParseScope parses a scope as the extension writes it: "principal",
// "global", "header:<Header-Name>", "path:<param>", "sender:<name>", or
// "principal+" before a header or path scope. A header or path parameter
// name is an RFC 9110 token; a sender name is as ValidName says.
func ParseScope(s string) (Scope, error) {
	rest, both := strings.CutPrefix(s, string(ScopePrincipal)+"+")
	var sc Scope
	switch {
	case rest == string(ScopePrincipal) || rest == string(ScopeGlobal):
		sc = Scope{Kind: ScopeKind(rest)}
	case strings.HasPrefix(rest, "header:") && ValidHeaderName(rest[len("header:"):]):
		sc = Scope{Kind: ScopeHeader, Name: rest[len("header:"):]}
	case strings.HasPrefix(rest, "path:") && ValidHeaderName(rest[len("path:"):]):
		sc = Scope{Kind: ScopePath, Name: rest[len("path:"):]}
	case strings.HasPrefix(rest, "sender:") && ValidName(rest[len("sender:"):]):
		sc = Scope{Kind: ScopeSender, Name: rest[len("sender:"):]}
	default:
		return Scope{}, fmt.Errorf("%q is not a scope; use principal, global, header:<Header-Name>, path:<param> or sender:<name> "+
			"(principal+header:<Header-Name> or principal+path:<param> for both)", s)
	}
	if both {
		if sc.Kind != ScopeHeader && sc.Kind != ScopePath {
			return Scope{}, fmt.Errorf("%q is not a scope: only a header or path scope combines with the principal (principal+header:<Header-Name>, principal+path:<param>)", s)
		}
		sc.Principal = true
	}
	return sc, nil
}

// String returns the scope as the extension writes it, which ParseScope
// reads back.
func (s Scope) String() string {
	prefix := ""
	if s.Principal {
		prefix = string(ScopePrincipal) + "+"
	}
	switch s.Kind {
	case ScopeHeader, ScopeSender, ScopePath:
		return prefix + string(s.Kind) + ":" + s.Name
	case "":
		return string(ScopePrincipal)
	}
	return string(s.Kind)
}

// NeedsPrincipal reports whether resolving the scope needs the caller's
// identity.
func (s Scope) NeedsPrincipal() bool { return s.Kind == "" || s.Kind == ScopePrincipal || s.Principal }

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

// MaxScopeLength bounds a scope value (a principal, a header's value), in bytes.
const MaxScopeLength = 255

// CheckScope refuses a scope value the store cannot hold or index well:
// invalid UTF-8, a NUL character, or more than MaxScopeLength bytes. The
// error is an *Error of kind KindInvalidScope (400).
func CheckScope(scope string) error {
	switch {
	case len(scope) > MaxScopeLength:
		return scopeError("the scope value is %d bytes long; at most %d are allowed", len(scope), MaxScopeLength)
	case !utf8.ValidString(scope):
		return scopeError("the scope value is not valid UTF-8")
	case strings.IndexByte(scope, 0) >= 0:
		return scopeError("the scope value contains a NUL character")
	}
	return nil
}

func scopeError(format string, args ...any) error {
	return &Error{Kind: KindInvalidScope, Detail: fmt.Sprintf(format, args...)}
}

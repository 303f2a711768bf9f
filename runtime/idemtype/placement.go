package idemtype

import (
	"fmt"
	"strings"
)

// PlacementKind says where an operation's placement comes from.
type PlacementKind string

// The placement kinds.
const (
	// PlacementPrincipal maps the authenticated caller to a placement with
	// the runtime's Placement function (the principal itself is often a
	// credential, and is never kept in clear).
	PlacementPrincipal PlacementKind = "principal"
	// PlacementHeader reads a request header that names the tenant.
	PlacementHeader PlacementKind = "header"
	// PlacementPath reads a path parameter.
	PlacementPath PlacementKind = "path"
	// PlacementBody reads a JSON Pointer into the request body.
	PlacementBody PlacementKind = "body"
)

// Placement is the value of the request an operation's records are placed
// by (the x-idempotency extension's placement): the value its business
// rows are distributed by, a tenant's or an account's id. The record keeps
// it in clear. The zero Placement is none.
type Placement struct {
	Kind PlacementKind
	Name string // the header, the path parameter, or the body's JSON Pointer
}

// IsZero reports whether p places nothing.
func (p Placement) IsZero() bool { return p.Kind == "" }

// String returns p as the extension writes it, which ParsePlacement reads
// back.
func (p Placement) String() string {
	if p.Kind == PlacementPrincipal || p.Kind == "" {
		return string(p.Kind)
	}
	return string(p.Kind) + ":" + p.Name
}

// secretHeaders are request headers that carry credentials besides those
// CredentialHeader names: API keys and tokens by their usual names.
var secretHeaders = []string{"X-Api-Key", "Api-Key", "X-Auth-Token", "X-Access-Token", "X-Amz-Security-Token"}

// ParsePlacement reads a placement: principal, header:<Header-Name>,
// path:<param> or body:<JSON Pointer>. A header that carries credentials
// is refused: the record keeps its placement in clear.
func ParsePlacement(s string) (Placement, error) {
	kind, name, _ := strings.Cut(s, ":")
	switch {
	case s == string(PlacementPrincipal):
		return Placement{Kind: PlacementPrincipal}, nil
	case kind == string(PlacementHeader) && ValidHeaderName(name):
		if CredentialHeader(name) || oneOf(name, secretHeaders) {
			return Placement{}, fmt.Errorf("%q reads a credential: a record keeps its placement in clear; place by a header, a path parameter or a body member that names the tenant, or map the caller to one (placement: principal and the runtime's Placement)", s)
		}
		return Placement{Kind: PlacementHeader, Name: name}, nil
	case kind == string(PlacementPath) && ValidHeaderName(name):
		return Placement{Kind: PlacementPath, Name: name}, nil
	case kind == string(PlacementBody):
		if _, err := ParsePointer(name); err != nil || name == "" {
			return Placement{}, fmt.Errorf("%q: %q is not a JSON Pointer into the body (such as /account)", s, name)
		}
		return Placement{Kind: PlacementBody, Name: name}, nil
	}
	return Placement{}, fmt.Errorf("%q is not a placement; use principal, header:<Header-Name>, path:<param> or body:<JSON Pointer>", s)
}

// Package idemcond serves conditional writes (RFC 9110, section 13): the
// natural idempotency of a PUT or DELETE whose request says which version
// of the resource it was based on. A row's version column is the
// resource's strong ETag; If-Match is checked against it in the
// transaction that writes the row, so that a delayed retry, or a client
// that read before another wrote, gets 412 Precondition Failed instead of
// erasing a newer write; If-None-Match: * creates a resource only if it does
// not exist; an operation that requires a precondition answers a request
// without one 428 Precondition Required (RFC 6585).
//
// It is the server side of what runtime/idemclient's Conditional expects:
// the ETag a GET or a write returned, sent back unchanged. It needs no
// Idempotency-Key and no engine: the writes run in the caller's pgx.Tx, in
// any handler (a strict server's, echo's, net/http's).
//
// Refusals are RFC 9457 problems of the type urn:idemgen:problem:<kind>, as
// the engine's are: 400 invalid-precondition, 404 not-found, 412
// precondition-failed, 428 precondition-required. Their detail says what
// to do.
package idemcond

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// The precondition headers this package reads.
const (
	IfMatch     = "If-Match"
	IfNoneMatch = "If-None-Match"
)

// Version is a resource's version: a row's bigint version column, which
// every write of the row increments. Its ETag is the resource's strong
// entity tag.
type Version int64

// ETag returns v as a strong entity tag, the value of an ETag header: the
// version in decimal, quoted ("7"). Clients send it back unchanged in
// If-Match.
func (v Version) ETag() string { return `"` + strconv.FormatInt(int64(v), 10) + `"` }

// Preconditions are a request's If-Match and If-None-Match, parsed. The zero
// value holds none: a write under it is unconditional.
type Preconditions struct {
	ifMatch, ifNoneMatch tagList
}

// tagList is one precondition header: "*", or a list of entity tags.
type tagList struct {
	sent bool
	any  bool // "*"
	tags []entityTag
	raw  string // as sent, for messages
}

type entityTag struct {
	weak   bool
	opaque string // with its quotes
}

// Parse parses a request's If-Match and If-None-Match values, as a strict
// handler receives its header parameters; "" is a header not sent. A
// header sent on several lines is one value, its lines joined by ", "
// (ParseHeader does that). A malformed value is a 400 *Error whose detail
// says how to send it; so is a weak entity tag in If-Match, which compares
// strongly (RFC 9110 would make it a precondition that fails, 412, which
// reads as another writer's change: it is the client's mistake, a tag
// weakened on its way, often by a proxy that compresses answers).
func Parse(ifMatch, ifNoneMatch string) (Preconditions, error) {
	var p Preconditions
	var err error
	if p.ifMatch, err = parseList(IfMatch, ifMatch); err != nil {
		return Preconditions{}, err
	}
	if p.ifNoneMatch, err = parseList(IfNoneMatch, ifNoneMatch); err != nil {
		return Preconditions{}, err
	}
	return p, nil
}

// ParseHeader parses the If-Match and If-None-Match of a request's header,
// each header's lines joined into one list (RFC 9110, section 5.3).
func ParseHeader(h http.Header) (Preconditions, error) {
	return Parse(strings.Join(h.Values(IfMatch), ", "), strings.Join(h.Values(IfNoneMatch), ", "))
}

// parseList parses the value of If-Match or If-None-Match:
// "*" / #entity-tag, where entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE.
func parseList(name, v string) (tagList, error) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return tagList{}, nil
	}
	l := tagList{sent: true, raw: v}
	if v == "*" {
		l.any = true
		return l, nil
	}
	bad := func(why string) error {
		return &Error{Status: http.StatusBadRequest, Detail: fmt.Sprintf("%s: %s %s", name, quote(v), why)}
	}
	for rest := v; ; {
		rest = strings.TrimLeft(rest, " \t")
		if rest == "" {
			break
		}
		if rest[0] == ',' { // an empty list element, which recipients ignore
			rest = rest[1:]
			continue
		}
		var t entityTag
		switch {
		case rest[0] == '*':
			return tagList{}, bad(`mixes * with entity tags: * stands alone ("any current version"); send either * or a list of ETags`)
		case strings.HasPrefix(rest, "W/"):
			t.weak = true
			rest = rest[2:]
		case strings.HasPrefix(rest, "w/"):
			return tagList{}, bad(`is not a list of entity tags: a weak tag begins with W/, upper case; send the ETag header's value as it came`)
		}
		if rest == "" || rest[0] != '"' {
			return tagList{}, bad(`is not a list of entity tags: send the ETag header's value as it came, double quotes included (` + name + `: "7", not ` + name + `: 7)`)
		}
		end := strings.IndexByte(rest[1:], '"')
		if end < 0 {
			return tagList{}, bad(`has an entity tag without its closing double quote: send the ETag header's value as it came`)
		}
		t.opaque = rest[:end+2]
		for i := 1; i < len(t.opaque)-1; i++ {
			if c := t.opaque[i]; c < 0x21 || c == 0x7f { // etagc = %x21 / %x23-7E / obs-text; '"' ends the tag
				return tagList{}, bad(`has a space or a control character inside an entity tag: send the ETag header's value as it came`)
			}
		}
		if t.weak && name == IfMatch {
			return tagList{}, bad(`holds a weak entity tag (W/), and If-Match compares ETags strongly (RFC 9110, 13.1.1): send the ETag this API returned, without W/ (a proxy that compresses answers may have weakened it: read the ETag from an answer it did not compress)`)
		}
		l.tags = append(l.tags, t)
		rest = strings.TrimLeft(rest[end+2:], " \t")
		if rest != "" && rest[0] != ',' {
			return tagList{}, bad(`is not a comma-separated list of entity tags: send the ETag header's value as it came, or several of them separated by commas`)
		}
	}
	if len(l.tags) == 0 {
		return tagList{}, bad(`holds no entity tag: send the ETag header's value as it came, or leave the header out`)
	}
	return l, nil
}

// quote is a header's value for a message: at most 80 bytes of it, as sent
// but for control characters, made "?".
func quote(v string) string {
	if len(v) > 80 {
		v = v[:80] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, v)
}

// Check evaluates the preconditions against the resource's current state,
// as RFC 9110 (section 13.2.2) orders them: If-Match, strongly compared,
// holds when the resource exists and its ETag is one of the list, or the
// list is *; If-None-Match, weakly compared, holds when the resource does
// not exist, or (for a list) its ETag is none of the list. It returns nil
// when every precondition sent holds, a 412 *Error otherwise. Run it on the
// version read with SELECT ... FOR UPDATE, in the transaction that writes:
// Table's methods do.
func (p Preconditions) Check(current Version, exists bool) error {
	etag := current.ETag()
	if m := p.ifMatch; m.sent {
		switch {
		case !exists:
			return failed("there is no resource for If-Match %s to match: it was deleted, or never created", quote(m.raw))
		case !m.any && !m.has(etag, false):
			return failed("If-Match is %s and the resource's ETag is now %s: it changed since it was read. GET it again and decide on what it holds now", quote(m.raw), etag)
		}
	}
	if n := p.ifNoneMatch; n.sent && exists {
		switch {
		case n.any:
			return failed("the resource exists (ETag %s), and If-None-Match: * writes only one that does not. GET it: it may be an earlier attempt of this very request", etag)
		case n.has(etag, true):
			return failed("If-None-Match is %s and matches the resource's ETag %s", quote(n.raw), etag)
		}
	}
	return nil
}

// has reports whether l lists etag: compared strongly (neither weak, the
// same opaque tag) or weakly (the same opaque tag).
func (l tagList) has(etag string, weak bool) bool {
	for _, t := range l.tags {
		if t.opaque == etag && (weak || !t.weak) {
			return true
		}
	}
	return false
}

// ifMatchSent and createOnly say what the write helpers need.
func (p Preconditions) ifMatchSent() bool { return p.ifMatch.sent }
func (p Preconditions) createOnly() bool  { return p.ifNoneMatch.any }

func failed(format string, args ...any) *Error {
	return &Error{Status: http.StatusPreconditionFailed, Detail: fmt.Sprintf(format, args...)}
}

// required is the 428 for a request without the precondition header name.
func required(name string) *Error {
	d := "this operation requires If-Match: GET the resource, and send its ETag header's value as If-Match, so that a write based on an older read is refused (412) instead of erasing a newer one"
	if name == IfNoneMatch {
		d = "this operation requires If-None-Match: *: it creates the resource only if it does not exist, so that a retry, or another client, cannot replace it"
	}
	return &Error{Status: http.StatusPreconditionRequired, Detail: d}
}

// Require returns net/http middleware for an operation whose spec requires
// the precondition header name (If-Match or If-None-Match; it panics on
// another name): a required header parameter, which makes the generated
// client retry the write as a conditional one. Before the router binds the
// header (oapi-codegen would answer 400), it answers a request without
// the header 428, and one whose If-Match or If-None-Match is malformed 400,
// each a problem that says what to send; it joins a header sent on several
// lines into one. With echo, give it to the operation in
// RegisterOptions.OperationMiddlewares through echo.WrapMiddleware.
func Require(name string) func(http.Handler) http.Handler {
	name = http.CanonicalHeaderKey(name)
	if name != IfMatch && name != IfNoneMatch {
		panic("idemcond.Require: " + strconv.Quote(name) + " is not If-Match or If-None-Match")
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := ParseHeader(r.Header)
			if err == nil && !(name == IfMatch && p.ifMatch.sent || name == IfNoneMatch && p.ifNoneMatch.sent) {
				err = required(name)
			}
			if err != nil {
				writeResponse(w, err.(*Error).Response())
				return
			}
			for _, h := range []string{IfMatch, IfNoneMatch} {
				if v := r.Header.Values(h); len(v) > 1 {
					r.Header.Set(h, strings.Join(v, ", "))
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

func writeResponse(w http.ResponseWriter, resp *idemtype.Response) {
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
}

// Error is a request that its preconditions refuse, or that names no
// resource: its Status is 400 (a malformed If-Match or If-None-Match), 404
// (no such resource), 412 (a precondition is false) or 428 (a required
// precondition was not sent). Detail says what to do, for the client.
type Error struct {
	Status int
	Detail string
}

func (e *Error) Error() string {
	return fmt.Sprintf("idemcond: %d %s: %s", e.Status, e.kind(), e.Detail)
}

func (e *Error) kind() string {
	switch e.Status {
	case http.StatusBadRequest:
		return "invalid-precondition"
	case http.StatusNotFound:
		return "not-found"
	case http.StatusPreconditionRequired:
		return "precondition-required"
	default:
		return "precondition-failed"
	}
}

var titles = map[int]string{
	http.StatusBadRequest:           "If-Match or If-None-Match is malformed",
	http.StatusNotFound:             "No such resource",
	http.StatusPreconditionFailed:   "A precondition of the request is false",
	http.StatusPreconditionRequired: "This operation requires a precondition",
}

// Problem returns the error's problem document (RFC 9457), of the type
// urn:idemgen:problem:<kind>: invalid-precondition, not-found,
// precondition-failed or precondition-required. A strict handler returns
// it as its operation's typed problem response of that status.
func (e *Error) Problem() idemtype.Problem {
	return idemtype.Problem{Type: idemtype.ProblemTypeBase + e.kind(), Title: titles[e.Status], Status: e.Status, Detail: e.Detail}
}

// Response returns the error as the complete response to send:
// application/problem+json, with the problem as its body.
func (e *Error) Response() *idemtype.Response {
	body, _ := json.Marshal(e.Problem())
	return &idemtype.Response{Status: e.Status, Header: http.Header{"Content-Type": {idemtype.ProblemContentType}}, Body: body}
}

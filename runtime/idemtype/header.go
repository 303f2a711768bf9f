package idemtype

import "strings"

// credentialHeaders carry credentials or per-client state.
var credentialHeaders = []string{"Set-Cookie", "Authorization", "Proxy-Authorization", "WWW-Authenticate", "Proxy-Authenticate", "Cookie"}

// framingHeaders describe how one response's body is framed on the wire.
var framingHeaders = []string{"Content-Length", "Transfer-Encoding", "Content-Encoding"}

// CredentialHeader reports whether the response header name (in any case)
// carries credentials or per-client state (Set-Cookie, Authorization,
// Proxy-Authorization, WWW-Authenticate, Proxy-Authenticate, Cookie). Such
// a header is never stored, whatever a policy lists.
func CredentialHeader(name string) bool { return oneOf(name, credentialHeaders) }

// FramingHeader reports whether the response header name (in any case)
// frames the body on the wire (Content-Length, Transfer-Encoding,
// Content-Encoding). The server sets these for each response, so a stored
// copy would contradict the body actually sent: a policy may not replay
// them.
func FramingHeader(name string) bool { return oneOf(name, framingHeaders) }

// NeverStored reports whether the response header name is never stored
// for replay: a credential or a framing header.
func NeverStored(name string) bool { return CredentialHeader(name) || FramingHeader(name) }

// oneOf reports whether name is one of names, ignoring case; it does not
// allocate, for it runs on every stored response.
func oneOf(name string, names []string) bool {
	for _, n := range names {
		if strings.EqualFold(name, n) {
			return true
		}
	}
	return false
}

// IntentAgeHeader carries how old a request's intent is, in whole seconds
// since the client began it (RFC 9111's delta-seconds: digits only). A
// client that keeps its key with the intent sends it on every attempt, so
// that the server sees retries that arrive near or past its retention.
const IntentAgeHeader = "Idempotency-Intent-Age"

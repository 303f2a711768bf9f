package idemtype

import "strings"

// neverStored are the lower-case names of response headers that carry credentials or per-client
// state.
var neverStored = map[string]bool{
	"set-cookie": true, "authorization": true, "proxy-authorization": true,
	"www-authenticate": true, "proxy-authenticate": true, "cookie": true,
}

// framing are the lower-case names of the headers that describe how one response's body is framed
// on the wire.
var framing = map[string]bool{"content-length": true, "transfer-encoding": true, "content-encoding": true}

// CredentialHeader reports whether the response header name (in any case)
// carries credentials or per-client state (Set-Cookie, Authorization,
// Proxy-Authorization, WWW-Authenticate, Proxy-Authenticate, Cookie). Such
// a header is never stored, whatever a policy lists.
func CredentialHeader(name string) bool { return neverStored[strings.ToLower(name)] }

// FramingHeader reports whether the response header name (in any case)
// frames the body on the wire (Content-Length, Transfer-Encoding,
// Content-Encoding). The server sets these for each response, so a stored
// copy would contradict the body actually sent: a policy may not replay
// them.
func FramingHeader(name string) bool { return framing[strings.ToLower(name)] }

// NeverStored reports whether the response header name is never stored
// for replay: a credential or a framing header.
func NeverStored(name string) bool {
	name = strings.ToLower(name)
	return neverStored[name] || framing[name]
}

package idem

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
)

// A stored response's headers are coded, not JSON: they are in every
// record, and a name that HTTP/2 would send as one byte costs one byte here
// too (docs/internals.md, "The record"). The block is a sequence of fields,
// one per value, names in sorted order and each name's values in order:
//
//	field = name value
//	      | the byte 1, name: a name present with no value
//	name  = a byte n in [15, 61]: staticNames[n], the name of entry n of
//	        HPACK's static table (RFC 7541, Appendix A) as net/http
//	        canonicalises it
//	      | the byte 0, the name's length (uvarint), the name
//	value = its length (uvarint), the value
//
// A name present with no value is how a handler stops net/http's own
// header (Content-Type's sniffing, Date): it reads back present, so that a
// replay from the store sends what the first answer sent.
//
// A name is coded only when it is exactly staticNames[n], so every name
// reads back as it was written. A block's first byte is 0, 1, or at least
// 15 and at most 61: never '{' or 'n', with which the JSON of records
// written before migration 005 begins, so parseHeaders reads both.
// staticNames only ever grows: stored records refer to it.

// staticNames maps HPACK's static table index to the header name. Indexes
// 1 to 14 are pseudo-headers and name-value pairs of requests.
var staticNames = [...]string{
	15: "Accept-Charset", 16: "Accept-Encoding", 17: "Accept-Language", 18: "Accept-Ranges", 19: "Accept",
	20: "Access-Control-Allow-Origin", 21: "Age", 22: "Allow", 23: "Authorization", 24: "Cache-Control",
	25: "Content-Disposition", 26: "Content-Encoding", 27: "Content-Language", 28: "Content-Length",
	29: "Content-Location", 30: "Content-Range", 31: "Content-Type", 32: "Cookie", 33: "Date", 34: "Etag",
	35: "Expect", 36: "Expires", 37: "From", 38: "Host", 39: "If-Match", 40: "If-Modified-Since",
	41: "If-None-Match", 42: "If-Range", 43: "If-Unmodified-Since", 44: "Last-Modified", 45: "Link",
	46: "Location", 47: "Max-Forwards", 48: "Proxy-Authenticate", 49: "Proxy-Authorization", 50: "Range",
	51: "Referer", 52: "Refresh", 53: "Retry-After", 54: "Server", 55: "Set-Cookie",
	56: "Strict-Transport-Security", 57: "Transfer-Encoding", 58: "User-Agent", 59: "Vary", 60: "Via",
	61: "Www-Authenticate",
}

const firstStatic = 15

// noValue is the code of a field that names a header present with no
// value.
const noValue = 1

// staticIndex is staticNames reversed.
var staticIndex = func() map[string]byte {
	m := make(map[string]byte, len(staticNames))
	for i, name := range staticNames {
		if name != "" {
			m[name] = byte(i)
		}
	}
	return m
}()

// appendHeaders appends h's coded block to dst. A name without values is
// written as such (noValue).
func appendHeaders(dst []byte, h http.Header) []byte {
	var room [16]string
	names := room[:0]
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if len(h[name]) == 0 {
			dst = appendName(append(dst, noValue), name)
		}
		for _, v := range h[name] {
			dst = appendName(dst, name)
			dst = binary.AppendUvarint(dst, uint64(len(v)))
			dst = append(dst, v...)
		}
	}
	return dst
}

// appendName appends name's code.
func appendName(dst []byte, name string) []byte {
	if i, ok := staticIndex[name]; ok {
		return append(dst, i)
	}
	dst = append(dst, 0)
	dst = binary.AppendUvarint(dst, uint64(len(name)))
	return append(dst, name...)
}

var errHeaderBlock = errors.New("idem: a stored header block is malformed")

// parseHeaders reads a block of appendHeaders, or the JSON that the engine
// stored before migration 005. NULL (nil) is no headers.
func parseHeaders(b []byte) (http.Header, error) {
	if len(b) > 0 && (b[0] == '{' || b[0] == 'n') {
		var h http.Header
		if err := json.Unmarshal(b, &h); err != nil {
			return nil, fmt.Errorf("idem: decoding stored headers: %w", err)
		}
		return h, nil
	}
	h := http.Header{}
	str := func() (string, bool) {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return "", false
		}
		s := string(b[w : w+int(n)])
		b = b[w+int(n):]
		return s, true
	}
	name := func() (string, error) {
		if len(b) == 0 {
			return "", errHeaderBlock
		}
		code := b[0]
		b = b[1:]
		switch {
		case code == 0:
			if name, ok := str(); ok {
				return name, nil
			}
			return "", errHeaderBlock
		case code >= firstStatic && int(code) < len(staticNames):
			return staticNames[code], nil
		}
		return "", fmt.Errorf("%w: name code %d", errHeaderBlock, code)
	}
	for len(b) > 0 {
		if b[0] == noValue {
			b = b[1:]
			name, err := name()
			if err != nil {
				return nil, err
			}
			if _, ok := h[name]; !ok {
				h[name] = nil
			}
			continue
		}
		name, err := name()
		if err != nil {
			return nil, err
		}
		v, ok := str()
		if !ok {
			return nil, errHeaderBlock
		}
		h[name] = append(h[name], v)
	}
	return h, nil
}

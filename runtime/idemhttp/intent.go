package idemhttp

import (
	"net/http"
	"strconv"
	"time"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// IntentAgeHeader carries how old a request's intent is (see
// idemtype.IntentAgeHeader). The generated client and runtime/idemclient
// send it on every attempt, so that the service sees retries arriving near
// or past its retention, when a retry may execute again because its record
// is gone.
const IntentAgeHeader = idemtype.IntentAgeHeader

// maxIntentAge is the largest age taken, as RFC 9111 caps Age: 2^31 s.
const maxIntentAge = 1 << 31

// IntentAge returns the age the request's IntentAgeHeader gives, and
// whether it gave one. A header that is not one field of digits is
// ignored, as if absent: it is a signal, never a reason to refuse a
// request. An age above 2^31 seconds is taken as 2^31.
func IntentAge(h http.Header) (time.Duration, bool) {
	vs := h.Values(IntentAgeHeader)
	if len(vs) != 1 || vs[0] == "" {
		return 0, false
	}
	for _, c := range []byte(vs[0]) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(vs[0], 10, 64)
	if err != nil || n > maxIntentAge {
		n = maxIntentAge
	}
	return time.Duration(n) * time.Second, true
}

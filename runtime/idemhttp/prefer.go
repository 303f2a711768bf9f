package idemhttp

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// PreferWait returns the wait preference of h's Prefer headers (RFC 7240,
// section 4.3: Prefer: wait=N, in seconds), and whether it has one: how
// long the client is willing to wait for an answer. Preferences are a
// comma-separated list in one or more Prefer fields, each a token with an
// optional value (bare or quoted) and parameters after semicolons; names
// are case-insensitive. Only the first wait counts (section 2); one whose
// value is not a number of seconds is ignored, as a preference the server
// does not understand, never a reason to refuse the request. A wait above
// 2^31 seconds is taken as 2^31.
func PreferWait(h http.Header) (time.Duration, bool) {
	for _, field := range h.Values("Prefer") {
		for _, pref := range splitQuoted(field, ',') {
			tok, _, _ := strings.Cut(pref, ";")
			name, value, _ := strings.Cut(tok, "=")
			if !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			value = strings.TrimSpace(value)
			if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
				value = value[1 : len(value)-1]
			}
			if value == "" || strings.TrimLeft(value, "0123456789") != "" {
				return 0, false
			}
			n, err := strconv.ParseUint(value, 10, 64)
			if err != nil || n > maxIntentAge {
				n = maxIntentAge
			}
			return time.Duration(n) * time.Second, true
		}
	}
	return 0, false
}

// PreferenceAppliedWait is the Preference-Applied value that says a
// request's wait preference of d was honoured.
func PreferenceAppliedWait(d time.Duration) string {
	return "wait=" + strconv.FormatInt(int64(d/time.Second), 10)
}

// splitQuoted splits s at sep outside double-quoted strings.
func splitQuoted(s string, sep byte) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && quoted:
			i++
		case c == '"':
			quoted = !quoted
		case c == sep && !quoted:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

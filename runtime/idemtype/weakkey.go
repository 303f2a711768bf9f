package idemtype

import "time"

// The ways a key may look weak (WeakKey): a key another intent's client
// is likely to send too, so that two intents are taken for one. At 800
// requests a second (69 million a day), keys of 32 random bits make about
// 560,000 colliding pairs a day, and a key that is the request's
// millisecond is shared with another request about 55% of the time; a
// UUIDv4 (122 random bits) makes about 4.5e-22 (docs/operations.md,
// "IdemgenWeakKeys").
const (
	WeakKeyTimestamp = "timestamp" // a Unix time (s, ms, µs or ns) near now, or an RFC 3339 time
	WeakKeyNumeric   = "numeric"   // digits only, shorter than 20: a counter, an order number
	WeakKeyShort     = "short"     // fewer than WeakKeyMinLength characters
)

// WeakKeyMinLength is the length under which a key looks weak: 16
// characters of any alphabet hold at most 16 x 6.5 bits.
const WeakKeyMinLength = 16

// WeakKeyReasons are the values WeakKey returns besides "".
var WeakKeyReasons = []string{WeakKeyTimestamp, WeakKeyNumeric, WeakKeyShort}

// WeakKey says why key looks weak at time now (WeakKeyTimestamp,
// WeakKeyNumeric, WeakKeyShort), or "" when it does not. It reads the key
// only: a long key of low entropy passes.
func WeakKey(key string, now time.Time) string {
	digits := key != ""
	for i := 0; i < len(key); i++ {
		if key[i] < '0' || key[i] > '9' {
			digits = false
			break
		}
	}
	switch {
	case digits && unixNearNow(key, now):
		return WeakKeyTimestamp
	case !digits && rfc3339NearNow(key, now):
		return WeakKeyTimestamp
	case digits && len(key) < 20:
		return WeakKeyNumeric
	case len([]rune(key)) < WeakKeyMinLength:
		return WeakKeyShort
	}
	return ""
}

// weakKeyYears is how far from now a time in a key may be and still read
// as the time it was made.
const weakKeyYears = 20

// unixNearNow reports whether digits are a Unix time in seconds,
// milliseconds, microseconds or nanoseconds within weakKeyYears of now.
func unixNearNow(digits string, now time.Time) bool {
	if len(digits) != 10 && len(digits) != 13 && len(digits) != 16 && len(digits) != 19 {
		return false
	}
	var n int64
	for i := 0; i < len(digits); i++ {
		n = n*10 + int64(digits[i]-'0')
	}
	if n < 0 { // 19 digits past int64
		return false
	}
	var t time.Time
	switch len(digits) {
	case 10:
		t = time.Unix(n, 0)
	case 13:
		t = time.UnixMilli(n)
	case 16:
		t = time.UnixMicro(n)
	default:
		t = time.Unix(0, n)
	}
	return nearNow(t, now)
}

// rfc3339NearNow reports whether s is an RFC 3339 time within
// weakKeyYears of now.
func rfc3339NearNow(s string, now time.Time) bool {
	// Only a key shaped as one is parsed: time.Parse's error for any other
	// costs two allocations, on every keyed request.
	// (time.Parse takes a one-digit hour too: 2006-01-02T1:04:05Z.)
	if len(s) < len("2006-01-02T1:04:05Z") || s[4] != '-' || s[7] != '-' || s[10] != 'T' {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return err == nil && nearNow(t, now)
}

func nearNow(t, now time.Time) bool {
	return t.After(now.AddDate(-weakKeyYears, 0, 0)) && t.Before(now.AddDate(weakKeyYears, 0, 0))
}

package idemtype

import (
	"strconv"
	"testing"
	"time"
)

// TestWeakKey: keys a client of another intent is likely to send too are
// named for why; keys with enough randomness, or too long to read as a
// time or a counter, are not.
func TestWeakKey(t *testing.T) {
	now := time.Date(2026, 12, 5, 8, 30, 0, 0, time.UTC)
	for key, want := range map[string]string{
		strconv.FormatInt(now.Unix(), 10):      WeakKeyTimestamp,
		strconv.FormatInt(now.UnixMilli(), 10): WeakKeyTimestamp,
		strconv.FormatInt(now.UnixMicro(), 10): WeakKeyTimestamp,
		strconv.FormatInt(now.UnixNano(), 10):  WeakKeyTimestamp,
		"2026-12-05T08:29:59.123Z":             WeakKeyTimestamp,
		"2026-12-05T8:29:59Z":                  WeakKeyTimestamp, // time.Parse takes a one-digit hour
		"2026-12-05T8:29:59+01:00":             WeakKeyTimestamp,
		"42":                                   WeakKeyNumeric,
		"9999999999":                           WeakKeyNumeric, // ten digits, but 2286
		"order-42":                             WeakKeyShort,
		"a3f9c2e1":                             WeakKeyShort,
		"018f3c1e-7d2a-7cc4-9b1e-5f0a2d6c8e11": "",
		"f47ac10b-58cc-4372-a567-0e02b2c3d479": "",
		"12345678901234567890123":              "", // 23 digits: not a counter's nor a time's
		"1764923400000000000_AbCdEf":           "", // stripe-go's: a time and 36 random bits
		"req_8xSKOa6oCNvPtE01":                 "",
	} {
		if got := WeakKey(key, now); got != want {
			t.Errorf("WeakKey(%q) = %q; want %q", key, got, want)
		}
	}
}

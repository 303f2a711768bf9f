// Package idemhttp holds the HTTP side of the Idempotency-Key protocol that
// does not depend on a web framework: parsing the header and fingerprinting
// requests.
package idemhttp

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/dunglas/httpsfv"

	"github.com/idemgen/idemgen/runtime/idem"
)

// HeaderName is the default request header that carries the key.
const HeaderName = "Idempotency-Key"

// ReplayedHeader is set to "true" on every replayed response.
const ReplayedHeader = "Idempotent-Replayed"

// KeyFormat restricts key values.
type KeyFormat string

// Key formats.
const (
	FormatAny  KeyFormat = "any"  // any visible ASCII
	FormatUUID KeyFormat = "uuid" // an RFC 9562 UUID in its 36-character form
)

// KeyRule is the per-operation rule for the key header.
type KeyRule struct {
	Header    string    // header name; default Idempotency-Key
	Required  bool      // a missing key is an error (otherwise the request runs without idempotency)
	MaxLength int       // default 255
	Format    KeyFormat // default any
}

// DefaultMaxKeyLength is the default limit on key length.
const DefaultMaxKeyLength = 255

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// ParseKey returns the key carried by h under rule. The value may be an
// RFC 8941 sf-string ("abc", as the IETF draft specifies) or a bare value
// (what Stripe and Adyen clients send): visible ASCII without quotes, commas
// or spaces. It returns "" and nil when the header is absent and not required.
// Errors are *idem.Error of kind missing-key or invalid-key.
func ParseKey(h http.Header, rule KeyRule) (string, error) {
	name := rule.Header
	if name == "" {
		name = HeaderName
	}
	values := h.Values(name)
	switch {
	case len(values) == 0 && rule.Required:
		return "", &idem.Error{Kind: idem.KindMissingKey, Detail: "send an " + name + " header (a unique string per logical request)"}
	case len(values) == 0:
		return "", nil
	case len(values) > 1:
		return "", invalid("the %s header must appear once, got %d fields", name, len(values))
	}
	key, err := parseKeyValue(values[0])
	if err != nil {
		return "", invalid("%s: %s", name, err)
	}
	max := rule.MaxLength
	if max <= 0 {
		max = DefaultMaxKeyLength
	}
	switch {
	case key == "":
		return "", invalid("the %s header is empty", name)
	case len(key) > max:
		return "", invalid("the %s header is %d characters long; at most %d are allowed", name, len(key), max)
	case rule.Format == FormatUUID && !uuidRE.MatchString(key):
		return "", invalid("the %s header must be a UUID (8-4-4-4-12 hexadecimal digits)", name)
	}
	return key, nil
}

func invalid(format string, args ...any) error {
	return &idem.Error{Kind: idem.KindInvalidKey, Detail: fmt.Sprintf(format, args...)}
}

func parseKeyValue(raw string) (string, error) {
	v := strings.Trim(raw, " \t")
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			return "", fmt.Errorf("control character 0x%02x at byte %d", c, i)
		} else if c > 0x7e {
			return "", fmt.Errorf("non-ASCII byte 0x%02x at byte %d", c, i)
		}
	}
	if strings.HasPrefix(v, `"`) {
		item, err := httpsfv.UnmarshalItem([]string{v})
		if err != nil {
			return "", fmt.Errorf("not a valid structured-field string: %v", err)
		}
		s, ok := item.Value.(string)
		if !ok || len(item.Params.Names()) > 0 {
			return "", fmt.Errorf("must be a plain string without parameters")
		}
		return s, nil
	}
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case ' ', '\t', '"', ',', '\\':
			return "", fmt.Errorf("a bare value may not contain %q; quote it as a structured-field string", v[i])
		}
	}
	return v, nil
}

package idemhttp

import "strings"

// KeylessClient is the client a User-Agent names, as idem.EventKeyless counts
// it: its first product token without its version ("checkout-web/2.1
// (x)" is "checkout-web"), at most 40 of the characters letters, digits,
// '.', '_' and '-' (others become '_'); "unknown" when there is none. A
// principal is not used: it is often a credential, and there are as many
// as tenants.
func KeylessClient(userAgent string) string {
	tok, _, _ := strings.Cut(strings.TrimSpace(userAgent), " ")
	tok, _, _ = strings.Cut(tok, "/")
	if tok == "" {
		return "unknown"
	}
	b := []byte(tok[:min(len(tok), 40)])
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

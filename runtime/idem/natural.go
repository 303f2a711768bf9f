package idem

import (
	"fmt"
	"strings"
)

// A request with a natural key (KeyedRequest.NaturalKey, migration 008)
// completes through CompleteNatural or InsertCompletedNatural, made at load
// from Complete's and InsertCompleted's text as the layout sends them, so
// that they keep every clause those keep (the fence, the bounded wait, the
// retention from completion: the mutants of mutants_internal_test.go
// remove it from both). The receipt keeps the natural key and, as
// created_at, when it completed, for idemadmin.Reconcile.

// naturalVariants names the statement made from each block.
var naturalVariants = map[string]string{"Complete": "CompleteNatural", "InsertCompleted": "InsertCompletedNatural"}

// naturalRewrites are, for each block, the rewrites that make its variant.
var naturalRewrites = map[string][]struct{ old, new string }{
	"Complete": {
		{"created_at = NULL,", "created_at = statement_timestamp(), natural_key = @natural_key,"},
	},
	"InsertCompleted": {
		{"background, recovery_point)", "background, recovery_point, natural_key)"},
		{"interval '1 microsecond', NULL, NULL, NULL, NULL, NULL", "interval '1 microsecond', statement_timestamp(), NULL, NULL, NULL, NULL, @natural_key"},
	},
}

// naturalSQL is block name's variant of src; an error when a rewrite
// finds nothing to rewrite.
func naturalSQL(name, src string) (string, error) {
	for _, r := range naturalRewrites[name] {
		if strings.Count(src, r.old) != 1 {
			return "", fmt.Errorf("statement %s: natural.go's rewrite of %q finds it %d times, not once", name, r.old, strings.Count(src, r.old))
		}
		src = strings.Replace(src, r.old, r.new, 1)
	}
	return src, nil
}

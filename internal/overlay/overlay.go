// Package overlay makes a real-world spec exercise the generator: it marks
// operations idempotent in a loaded document, in memory, leaving the file
// unchanged. make realspec and the generator's benchmark use it.
package overlay

import (
	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgen/idemgen/spec"
)

// Idempotent adds x-idempotency: true (every default) to each POST and
// PATCH of doc that lacks the extension, and returns how many it marked.
func Idempotent(doc *openapi3.T) int {
	added := 0
	for _, p := range doc.Paths.InMatchingOrder() {
		item := doc.Paths.Value(p)
		for _, op := range []*openapi3.Operation{item.Post, item.Patch} {
			if op == nil {
				continue
			}
			if _, ok := op.Extensions[spec.ExtensionName]; ok {
				continue
			}
			if op.Extensions == nil {
				op.Extensions = map[string]any{}
			}
			op.Extensions[spec.ExtensionName] = true
			added++
		}
	}
	return added
}

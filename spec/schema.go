package spec

import _ "embed"

// JSONSchema is the JSON Schema (draft 2020-12) of the x-idempotency
// extension, for editors and spec linters.
//
//go:embed x-idempotency.schema.json
var JSONSchema []byte

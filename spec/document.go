package spec

import "github.com/getkin/kin-openapi/openapi3"

// Document is an OpenAPI document with its operations' extensions parsed
// and validated.
type Document struct {
	File       string
	OpenAPI    *openapi3.T
	Operations []*Operation // every operation, in the order of the spec (see Validate)
}

// Operation is one OpenAPI operation.
type Operation struct {
	Method      string // upper case
	Path        string // the path template
	OperationID string
	Op          *openapi3.Operation
	Idempotency *Extension         // nil when the operation has no x-idempotency (or false)
	at          *openapi3.Location // where the loader found the operation's key
	file        string             // the file the operation is in, as errors name it
	src         *source            // that file
}

// Idempotent returns the operations that carry the extension.
func (d *Document) Idempotent() []*Operation {
	var out []*Operation
	for _, op := range d.Operations {
		if op.Idempotency != nil {
			out = append(out, op)
		}
	}
	return out
}

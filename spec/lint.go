package spec

import (
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// Warning is advice about an operation that is valid but probably not safe
// to retry.
type Warning struct {
	File                      string // the file the operation is in, as errors name it
	Line                      int    // the operation's line; 0 when unknown
	Method, Path, OperationID string
	Message                   string
}

// String is the warning as errors read: "file:line: METHOD path (id): message".
func (w Warning) String() string {
	e := Error{File: w.File, Line: w.Line, Method: w.Method, Path: w.Path, OperationID: w.OperationID, Message: w.Message}
	return e.Error()
}

var preconditions = []string{"If-Match", "If-None-Match", "If-Unmodified-Since"}

// safeMethodDoc is where a reader learns to turn a GET that changes state
// into a POST.
const safeMethodDoc = `docs/testing.md, "A GET that changes state"`

// Lint warns on GET and HEAD operations with a request body, on POST and
// PATCH operations without x-idempotency, and on PUT and DELETE operations
// with neither x-idempotency nor a precondition header.
func Lint(d *Document) []Warning {
	var out []Warning
	for _, op := range d.Operations {
		w := Warning{File: op.file, Line: op.src.line(op.at, ""), Method: op.Method, Path: op.Path, OperationID: op.OperationID}
		if (op.Method == "GET" || op.Method == "HEAD") && op.Op.RequestBody != nil {
			w.Message = "a request body on a " + op.Method + " has no meaning (RFC 9110), and proxies, caches and clients may drop it; " +
				"a " + op.Method + " that needs one usually changes state: make it a POST (" + safeMethodDoc + "), " +
				"or move the body's values into query parameters"
			out = append(out, w)
			continue
		}
		if op.Idempotency != nil {
			continue
		}
		switch op.Method {
		case "POST", "PATCH":
			w.Message = "no x-idempotency: a client's retry after a timeout can apply this request twice"
		case "PUT", "DELETE":
			if hasPrecondition(op.Op) {
				continue
			}
			w.Message = "neither x-idempotency nor a precondition header (" + strings.Join(preconditions, ", ") + "): concurrent retries can overwrite each other's effects"
		default:
			continue
		}
		out = append(out, w)
	}
	return out
}

func hasPrecondition(o *openapi3.Operation) bool {
	for _, p := range o.Parameters {
		if p.Value == nil || p.Value.In != openapi3.ParameterInHeader {
			continue
		}
		for _, h := range preconditions {
			if strings.EqualFold(p.Value.Name, h) {
				return true
			}
		}
	}
	return false
}

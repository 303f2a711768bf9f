package spec

import (
	"net/url"
	"os"
	"path/filepath"

	"github.com/getkin/kin-openapi/openapi3"
)

// Load reads an OpenAPI 3.0 or 3.1 document from file and validates the
// x-idempotency extension of every operation. Problems with the extension
// come back together as Errors.
func Load(file string) (*Document, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return LoadData(file, data)
}

// LoadData is Load for a document already in memory; file names it in
// errors and resolves relative references.
func LoadData(file string, data []byte) (*Document, error) {
	doc, err := LoadOpenAPI(file, data)
	if err != nil {
		return nil, err
	}
	return Validate(file, data, doc)
}

// LoadOpenAPI parses data, the text of file, into a kin-openapi document
// without validating its extensions: the one parse of the spec that
// Validate, the generator and the enriched copy all read. It records
// origins, which point errors at lines, as oapi-codegen's own command does.
func LoadOpenAPI(file string, data []byte) (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	loader.IncludeOrigin = true
	loader.IsExternalRefsAllowed = true
	abs, _ := filepath.Abs(file)
	doc, err := loader.LoadFromDataWithPath(data, &url.URL{Path: filepath.ToSlash(abs)})
	if err != nil {
		return nil, &Error{File: file, Message: "not a valid OpenAPI document: " + err.Error()}
	}
	if doc.Paths == nil {
		doc.Paths = openapi3.NewPaths()
	}
	return doc, nil
}

package spec

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Validate checks the extensions of a loaded document. data is the
// document's text, used to point errors at lines; nil leaves lines out.
func Validate(file string, data []byte, doc *openapi3.T) (*Document, error) {
	d := &Document{File: file, OpenAPI: doc}
	files := newSources(file, data, doc)
	var errs Errors
	for _, path := range files.pathsInOrder(doc) {
		item := doc.Paths.Value(path)
		for _, m := range methodsInOrder(item) {
			o := item.GetOperation(m)
			op := &Operation{Method: strings.ToUpper(m), Path: path, OperationID: o.OperationID, Op: o}
			if o.Origin != nil {
				op.at = o.Origin.Key
			}
			op.file, op.src = files.of(op.at)
			d.Operations = append(d.Operations, op)
			raw, ok := o.Extensions[ExtensionName]
			if !ok {
				continue
			}
			at := func(field, format string, args ...any) {
				errs = append(errs, &Error{File: op.file, Line: op.src.line(op.at, field), Method: op.Method, Path: path,
					OperationID: o.OperationID, Field: field, Message: fmt.Sprintf(format, args...)})
			}
			x, ferrs := Parse(raw)
			for _, fe := range ferrs {
				at(fe.Field, "%s", fe.Message)
			}
			if x == nil {
				continue
			}
			op.Idempotency = x
			switch op.Method {
			case "GET", "HEAD", "OPTIONS", "TRACE":
				article := "a"
				if op.Method == "OPTIONS" {
					article = "an"
				}
				at(ExtensionName, "not allowed on %s: %s %s must change nothing, so it is idempotent by definition and needs no key; "+
					"remove x-idempotency, or, if the operation changes state, make it a POST (%s)", op.Method, article, op.Method, safeMethodDoc)
			}
			if o.OperationID == "" {
				at(ExtensionName, "the operation needs an operationId: it names the key namespace and the generated phases")
			}
			checkBody(op, at)
			checkReplayFits(op, at)
			checkPathScope(op, at)
			checkPathPlacement(op, at)
			checkNaturalKey(op, at)
		}
	}
	errs = append(errs, checkGroups(d)...)
	// By file, the root's first, then by line.
	sort.SliceStable(errs, func(i, j int) bool {
		a, b := errs[i], errs[j]
		if a.File != b.File {
			return a.File == file || (b.File != file && a.File < b.File)
		}
		return a.Line < b.Line
	})
	if len(errs) > 0 {
		return d, errs
	}
	return d, nil
}

// checkGroups: operations sharing a group share one key namespace, so they
// must agree on what scopes a key.
func checkGroups(d *Document) Errors {
	var errs Errors
	first := map[string]*Operation{}
	for _, op := range d.Idempotent() {
		g := op.Idempotency.Group
		if g == "" {
			continue
		}
		f, ok := first[g]
		if !ok {
			first[g] = op
			continue
		}
		if f.Idempotency.Scope != op.Idempotency.Scope || f.Idempotency.Key.Source() != op.Idempotency.Key.Source() {
			errs = append(errs, &Error{File: op.file, Line: op.src.line(op.at, ExtensionName+".group"), Method: op.Method, Path: op.Path,
				OperationID: op.OperationID, Field: ExtensionName + ".group",
				Message: fmt.Sprintf("group %q: scope %s and key %s differ from %s %s (scope %s, %s); operations of a group must agree on both",
					g, op.Idempotency.Scope, op.Idempotency.Key.Source(), f.Method, f.Path, f.Idempotency.Scope, f.Idempotency.Key.Source())})
		}
		if f.Idempotency.Placement != op.Idempotency.Placement {
			errs = append(errs, &Error{File: op.file, Line: op.src.line(op.at, ExtensionName+".group"), Method: op.Method, Path: op.Path,
				OperationID: op.OperationID, Field: ExtensionName + ".group",
				Message: fmt.Sprintf("group %q: placement %q differs from %s %s's %q; operations of a group share their keys, so they place them alike",
					g, op.Idempotency.Placement, f.Method, f.Path, f.Idempotency.Placement)})
		}
	}
	return errs
}

// checkPathPlacement checks that a path placement names one of the path's
// parameters.
func checkPathPlacement(op *Operation, at func(field, format string, args ...any)) {
	pl := op.Idempotency.Placement
	if pl.Kind != idemtype.PlacementPath {
		return
	}
	if params := idemhttp.RouteParams(op.Path); !slices.Contains(params, pl.Name) {
		at(ExtensionName+".placement", "path:%s names no parameter of the path %s (its parameters: %s)", pl.Name, op.Path, strings.Join(params, ", "))
	}
}

// checkNaturalKey checks that each path part of a natural key names one of
// the path's parameters (its body parts are checkBody's).
func checkNaturalKey(op *Operation, at func(field, format string, args ...any)) {
	params := idemhttp.RouteParams(op.Path)
	for i, part := range op.Idempotency.NaturalKey {
		if part.Kind == idemtype.PlacementPath && !slices.Contains(params, part.Name) {
			at(fmt.Sprintf("%s.natural-key[%d]", ExtensionName, i), "path:%s names no parameter of the path %s (its parameters: %s)", part.Name, op.Path, strings.Join(params, ", "))
		}
	}
}

// checkPathScope checks that a path scope names one of the path's
// parameters: the router gives the runtime nothing else by that name.
func checkPathScope(op *Operation, at func(field, format string, args ...any)) {
	sc := op.Idempotency.Scope
	if sc.Kind != idemtype.ScopePath {
		return
	}
	params := idemhttp.RouteParams(op.Path)
	if !slices.Contains(params, sc.Name) {
		if len(params) == 0 {
			at(ExtensionName+".scope", "path:%s names no parameter of the path %s, which has none; scope by a header, the principal or globally instead", sc.Name, op.Path)
			return
		}
		at(ExtensionName+".scope", "path:%s names no parameter of the path %s; its parameters are %s", sc.Name, op.Path, strings.Join(params, ", "))
	}
}

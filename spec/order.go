package spec

import (
	"cmp"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"
)

// pathsInOrder returns doc's paths in the order the root document lists
// them. kin-openapi keeps paths in a map; the origins it records give each
// path item's line, except for an item that is a $ref to another file,
// whose origin is in that file: the root's YAML nodes place those. Paths
// that have no place (a document without text) come last, sorted.
func (s *sources) pathsInOrder(doc *openapi3.T) []string {
	items := doc.Paths.Map()
	line := make(map[string]int, len(items))
	for path, item := range items {
		if o := item.Origin; o != nil && o.Key != nil && o.Key.Name == path && o.Key.File == s.rootFile {
			line[path] = o.Key.Line
		} else if k := s.root.pathKey(path); k != nil {
			line[path] = k.Line
		}
	}
	paths := make([]string, 0, len(items))
	for path := range items {
		paths = append(paths, path)
	}
	slices.SortFunc(paths, func(a, b string) int {
		la, oka := line[a]
		lb, okb := line[b]
		switch {
		case oka != okb && oka:
			return -1
		case oka != okb:
			return 1
		}
		return cmp.Or(cmp.Compare(la, lb), strings.Compare(a, b))
	})
	return paths
}

// pathKey returns the key node of path in the root document's paths
// object, or nil.
func (s *source) pathKey(path string) *yaml.Node {
	if s.index() == nil {
		return nil
	}
	_, paths := entry(s.root, "paths")
	if paths = deref(paths); paths == nil {
		return nil
	}
	k, _ := entry(paths, path)
	return k
}

// methodsInOrder returns the methods of item's operations (upper case) in
// the order the path item lists them; operations without an origin come
// last, sorted.
func methodsInOrder(item *openapi3.PathItem) []string {
	ops := item.Operations()
	methods := make([]string, 0, len(ops))
	if item.Origin != nil {
		for _, f := range item.Origin.Fields {
			if m := strings.ToUpper(f.Name); ops[m] != nil && !slices.Contains(methods, m) {
				methods = append(methods, m)
			}
		}
	}
	var rest []string
	for m := range ops {
		if !slices.Contains(methods, m) {
			rest = append(rest, m)
		}
	}
	slices.Sort(rest)
	return append(methods, rest...)
}

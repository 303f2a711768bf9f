package spec

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"
)

// source is one file of a spec, parsed into YAML nodes on first use. The
// OpenAPI loader parsed it already, and its origins say where each
// operation starts; they stop at the extension's key, since an extension's
// value is plain data. Only errors need to look inside it, so a valid spec
// of megabytes is not parsed a second time for nothing. The text of a file
// other than the root (path set instead of data) is read then too.
type source struct {
	data []byte
	path string
	root *yaml.Node // the document's top-level node
	// keys maps the position of every mapping key in the file to the
	// node it heads.
	keys   map[position]*yaml.Node
	parsed bool
}

type position struct{ line, column int }

// index parses the file and indexes its mapping keys; nil when there is no
// text to read or it does not parse.
func (s *source) index() map[position]*yaml.Node {
	if s.parsed {
		return s.keys
	}
	s.parsed = true
	if s.data == nil && s.path != "" {
		s.data, _ = os.ReadFile(s.path)
	}
	if s.data == nil {
		return nil
	}
	var doc yaml.Node
	if yaml.Unmarshal(s.data, &doc) != nil || doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil
	}
	s.root = doc.Content[0]
	s.keys = map[position]*yaml.Node{}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				s.keys[position{k.Line, k.Column}] = n.Content[i+1]
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(s.root)
	return s.keys
}

// line returns the line of field (e.g. "x-idempotency.phases[2].foreign")
// within the operation whose key the loader located at at: the line of the
// deepest step of the field the document has (a missing phase name points
// at its phase), or the operation's own line. 0 when the operation has no
// known position or its file no text.
func (s *source) line(at *openapi3.Location, field string) int {
	if at == nil || at.Line <= 0 {
		return 0
	}
	keys := s.index()
	if keys == nil {
		return 0
	}
	line := at.Line
	n := keys[position{at.Line, at.Column}]
	for _, step := range fieldSteps(field) {
		n = deref(n)
		switch {
		case n == nil:
			return line
		case step.index >= 0:
			if n.Kind != yaml.SequenceNode || step.index >= len(n.Content) {
				return line
			}
			n = n.Content[step.index]
			line = n.Line
		default:
			k, v := entry(n, step.key)
			if k == nil {
				return line
			}
			n, line = v, k.Line
		}
	}
	return line
}

// step is one step of a field's path: a key, or a list index (key "").
type step struct {
	key   string
	index int // -1 for a key
}

// fieldSteps splits a field as errors name it, e.g. "x-idempotency.phases[2].foreign".
func fieldSteps(field string) []step {
	var steps []step
	for _, part := range strings.Split(field, ".") {
		name, rest, _ := strings.Cut(part, "[")
		steps = append(steps, step{key: name, index: -1})
		for rest != "" {
			i, after, _ := strings.Cut(rest, "]")
			n, err := strconv.Atoi(i)
			if err != nil {
				break
			}
			steps = append(steps, step{index: n})
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return steps
}

// entry returns the key and value nodes of key in mapping n, or nils.
func entry(n *yaml.Node, key string) (*yaml.Node, *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i], n.Content[i+1]
		}
	}
	return nil, nil
}

// deref follows an alias to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// sources are the files of a spec: the root, whose text the caller has, and
// the files its path items' $refs name, read when an error is in them.
type sources struct {
	name     string // the root as errors name it
	root     *source
	rootFile string // the root as the loader's origins name it
	others   map[string]*source
}

// newSources returns the files of doc, whose root errors name file and
// whose text is data (nil: no lines, as for a document an overlay printed
// anew, whose lines are not the file's).
func newSources(file string, data []byte, doc *openapi3.T) *sources {
	s := &sources{name: file, root: &source{data: data}, rootFile: file, others: map[string]*source{}}
	// The paths object is always in the root document: its origin names
	// the root as the loader does.
	if o := doc.Paths.Origin; o != nil && o.Key != nil {
		s.rootFile = o.Key.File
	}
	return s
}

// of returns the file that holds the operation located at at, as errors
// name it (relative to the root's directory, as the root is named), and
// its source.
func (s *sources) of(at *openapi3.Location) (string, *source) {
	if at == nil || at.File == "" || at.File == s.rootFile || s.root.data == nil {
		return s.name, s.root
	}
	src := s.others[at.File]
	if src == nil {
		src = &source{path: at.File}
		s.others[at.File] = src
	}
	rootAbs, _ := filepath.Abs(s.rootFile)
	abs, _ := filepath.Abs(at.File)
	if rel, err := filepath.Rel(filepath.Dir(rootAbs), abs); err == nil {
		return filepath.Join(filepath.Dir(s.name), rel), src
	}
	return at.File, src
}

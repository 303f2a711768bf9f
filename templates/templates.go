// Package templates holds the text templates for files users own or read:
// phase scaffolds, the go:generate file and the generator config. A user
// overrides one by putting a file of the same name in a directory passed to
// the generator (-templates).
package templates

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"text/template"
)

//go:embed *.tmpl
var builtin embed.FS

// Names of the templates.
const (
	Scaffold = "scaffold.go.tmpl"  // one user-owned phase file per idempotent operation
	Generate = "generate.go.tmpl"  // a file holding the go:generate directive
	Config   = "idemgen.yaml.tmpl" // the generator's config file
)

// Load returns the named template, from overrideDir when it holds a file of
// that name, else the built-in one.
func Load(name, overrideDir string) (*template.Template, error) {
	var text []byte
	var err error
	if overrideDir != "" {
		text, err = os.ReadFile(filepath.Join(overrideDir, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	if text == nil {
		if text, err = builtin.ReadFile(name); err != nil {
			return nil, fmt.Errorf("templates: no template %q", name)
		}
	}
	return template.New(name).Option("missingkey=error").Parse(string(text))
}

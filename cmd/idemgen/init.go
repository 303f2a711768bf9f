package main

import (
	"bytes"
	"fmt"
	"go/format"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemgen/idemgen/gen"
	"github.com/idemgen/idemgen/templates"
)

func init() {
	register("init", "write a starter idemgen.yaml and a generate.go with the go:generate line", runInit)
}

// The files init writes, in the directory of the package to generate.
const (
	initConfig   = "idemgen.yaml"
	initGenerate = "generate.go"
)

func runInit(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("init", stderr)
	dir := fs.String("dir", ".", "directory of the Go package that will hold the generated code")
	specPath := fs.String("spec", "api.yaml", "the OpenAPI document, relative to the current directory")
	pkg := fs.String("package", "", "Go package name (default: the directory's name)")
	templatesDir := fs.String("templates", "", "directory of templates overriding the built-in generate.go and idemgen.yaml")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: idemgen init [-dir DIR] [-spec FILE] [-package NAME] [-templates DIR]")
		fmt.Fprintf(stderr, "Writes %s and %s into DIR, keeping any that already exist.\n", initConfig, initGenerate)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return errUsage
	}
	absDir, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if *pkg == "" {
		*pkg = filepath.Base(absDir)
		if !token.IsIdentifier(*pkg) || token.IsKeyword(*pkg) {
			return fmt.Errorf("directory name %q is not a Go package name; pass -package", *pkg)
		}
	} else if !token.IsIdentifier(*pkg) || token.IsKeyword(*pkg) {
		return fmt.Errorf("-package %q is not a Go package name", *pkg)
	}
	absSpec, err := filepath.Abs(*specPath)
	if err != nil {
		return err
	}
	relSpec, err := filepath.Rel(absDir, absSpec)
	if err != nil {
		return err
	}
	if strings.ContainsAny(relSpec, " \t\"'`") {
		return fmt.Errorf("the spec's path %q cannot stand in a go:generate line as one argument; use a path without spaces or quotes", relSpec)
	}
	res, err := renderInit(absDir, filepath.ToSlash(relSpec), *pkg, *templatesDir)
	if err != nil {
		return err
	}
	if err := gen.Write(res, *dir, stderr); err != nil {
		return err
	}
	if _, err := os.Stat(absSpec); err != nil {
		fmt.Fprintf(stderr, "note: %s does not exist yet; write it, then run go generate\n", *specPath)
	}
	return nil
}

// renderInit renders the starter files in memory. The config is read back
// by the loader generate uses, so init never writes a config that generate
// would reject or read differently (a package name that needs YAML quoting,
// an overriding template with a typo).
func renderInit(dir, spec, pkg, templatesDir string) (*gen.Result, error) {
	data := map[string]string{"Package": pkg, "Spec": spec, "Config": initConfig}
	render := func(name string) ([]byte, error) {
		tmpl, err := templates.Load(name, templatesDir)
		if err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		if err := tmpl.Execute(&buf, data); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return buf.Bytes(), nil
	}
	config, err := render(templates.Config)
	if err != nil {
		return nil, err
	}
	cfg, err := gen.ParseConfig(filepath.Join(dir, initConfig), config)
	if err != nil {
		return nil, fmt.Errorf("the rendered %s is not a valid config: %w", initConfig, err)
	}
	if cfg.Package() != pkg {
		return nil, fmt.Errorf("the rendered %s reads as package %q; want %q (quote the value in the template?)", initConfig, cfg.Package(), pkg)
	}
	src, err := render(templates.Generate)
	if err != nil {
		return nil, err
	}
	if src, err = format.Source(src); err != nil {
		return nil, fmt.Errorf("the rendered %s is not valid Go: %w", initGenerate, err)
	}
	return &gen.Result{Files: []gen.OutputFile{
		{Path: initConfig, Data: config, Owned: true},
		{Path: initGenerate, Data: src, Owned: true},
	}}, nil
}

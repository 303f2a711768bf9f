package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemgen/idemgen/gen"
	"github.com/idemgen/idemgen/spec"
)

func init() {
	register("generate", "generate models, echo handlers, idempotency glue and phase scaffolds (and, opt-in, a client) from a spec", runGenerate)
	register("check", "report x-idempotency errors and operations that are unsafe to retry", runCheck)
}

// fileConfig is the YAML config file. Paths are relative to the file.
type fileConfig struct {
	Spec          string `yaml:"spec"`
	Package       string `yaml:"package"`
	Output        string `yaml:"output"`
	OpenAPIOut    string `yaml:"openapi-out"`
	ClientOut     string `yaml:"client-out"`
	ClientPackage string `yaml:"client-package"`
	Templates     string `yaml:"templates"`
	NoScaffold    bool   `yaml:"no-scaffold"`
}

func loadConfig(path string) (gen.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return gen.Config{}, err
	}
	return parseConfig(path, data)
}

// parseConfig reads the config file at path, whose contents are data.
// Unknown fields are errors: a typo must not be silently ignored.
func parseConfig(path string, data []byte) (gen.Config, error) {
	var fc fileConfig
	dec := yaml.NewDecoder(bytesReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
		return gen.Config{}, fmt.Errorf("%s: %w (fields: spec, package, output, openapi-out, client-out, client-package, templates, no-scaffold)", path, err)
	}
	base := filepath.Dir(path)
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(base, p)
	}
	out := fc.Output
	if out == "" {
		out = "."
	}
	return gen.Config{Spec: rel(fc.Spec), Package: fc.Package, Output: rel(out), OpenAPIOut: fc.OpenAPIOut,
		ClientOut: fc.ClientOut, ClientPackage: fc.ClientPackage, Templates: rel(fc.Templates), NoScaffold: fc.NoScaffold}, nil
}

func runGenerate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("generate", stderr)
	configPath := fs.String("config", "", "YAML config file (spec, package, output, openapi-out, client-out, client-package, templates, no-scaffold); flags override it")
	specPath := fs.String("spec", "", "the OpenAPI document")
	pkg := fs.String("package", "", "Go package name of the output")
	out := fs.String("out", "", "output directory (default: the config's, or .)")
	openapiOut := fs.String("openapi-out", "", "also write an enriched copy of the spec here (relative to the output directory)")
	clientOut := fs.String("client-out", "", "also write a client package here (relative to the output directory): oapi-codegen's typed client and an idempotent wrapper")
	clientPkg := fs.String("client-package", "", "Go package name of the client (default: the last element of -client-out)")
	templatesDir := fs.String("templates", "", "directory of templates overriding the built-in scaffold")
	noScaffold := fs.Bool("no-scaffold", false, "do not write missing phase scaffolds")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var cfg gen.Config
	if *configPath != "" {
		var err error
		if cfg, err = loadConfig(*configPath); err != nil {
			return err
		}
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&cfg.Spec, *specPath)
	set(&cfg.Package, *pkg)
	set(&cfg.Output, *out)
	set(&cfg.OpenAPIOut, *openapiOut)
	set(&cfg.ClientOut, *clientOut)
	set(&cfg.ClientPackage, *clientPkg)
	set(&cfg.Templates, *templatesDir)
	cfg.NoScaffold = cfg.NoScaffold || *noScaffold
	if cfg.Output == "" {
		cfg.Output = "."
	}
	if cfg.Spec == "" || cfg.Package == "" {
		fmt.Fprintln(stderr, "idemgen generate: a spec and a package are required (-spec and -package, or -config)")
		fs.PrintDefaults()
		return errUsage
	}
	start := time.Now()
	fmt.Fprintf(stderr, "idemgen: generating package %s from %s\n", cfg.Package, cfg.Spec)
	res, err := gen.Generate(cfg)
	if err != nil {
		return specError(err, stderr)
	}
	if err := gen.Write(res, cfg.Output, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "idemgen: done in %v\n", time.Since(start).Round(time.Millisecond))
	return nil
}

// specError prints every spec problem on its own line and returns a summary.
func specError(err error, stderr io.Writer) error {
	var es spec.Errors
	if errors.As(err, &es) {
		for _, e := range es {
			fmt.Fprintln(stderr, e)
		}
		return fmt.Errorf("%d problem(s) in the spec", len(es))
	}
	return err
}

func runCheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("check", stderr)
	strict := fs.Bool("strict", false, "exit non-zero on warnings too")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: idemgen check [-strict] SPEC")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	doc, err := spec.Load(fs.Arg(0))
	if err != nil && !spec.IsErrors(err) {
		return err
	}
	var es spec.Errors
	errors.As(err, &es)
	for _, e := range es {
		fmt.Fprintln(stdout, "error:", e)
	}
	warnings := spec.Lint(doc)
	for _, w := range warnings {
		fmt.Fprintf(stdout, "warning: %s: %s\n", fs.Arg(0), w)
	}
	fmt.Fprintf(stdout, "%s: %d operations, %d idempotent, %d errors, %d warnings\n",
		fs.Arg(0), len(doc.Operations), len(doc.Idempotent()), len(es), len(warnings))
	switch {
	case len(es) > 0:
		return fmt.Errorf("%d error(s)", len(es))
	case *strict && len(warnings) > 0:
		return fmt.Errorf("%d warning(s) with -strict", len(warnings))
	}
	return nil
}

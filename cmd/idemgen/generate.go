package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/gen"
	"github.com/idemgen/idemgen/spec"
)

func init() {
	register("generate", "run oapi-codegen's config (models, echo strict server), then write the idempotency glue and phase scaffolds (-glue-only: only those)", runGenerate)
	register("check", "report x-idempotency errors and operations that are unsafe to retry", runCheck)
}

func runGenerate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("generate", stderr)
	configPath := fs.String("config", "", "oapi-codegen's config file (package, generate, output, output-options, import-mapping, compatibility, additional-imports...), with an optional idemgen: section")
	pkg := fs.String("package", "", "Go package name of the output (overrides the config's, as with oapi-codegen)")
	output := fs.String("o", "", "oapi-codegen's output file, when the config names none (default "+gen.DefaultOutput+"); the glue and scaffolds go beside it")
	glueOnly := fs.Bool("glue-only", false, "write only "+gen.GlueFile+" and the phase scaffolds, against the models and strict server your own oapi-codegen run wrote beside the output")
	check := fs.Bool("check", false, "write nothing: print how the generated files on disk differ from what the spec produces, and exit 1 if they do")
	openapiOut := fs.String("openapi-out", "", "also write an enriched copy of the spec here (relative to the output's directory)")
	clientOut := fs.String("client-out", "", "also write a client package here (relative to the output's directory): oapi-codegen's typed client and an idempotent wrapper")
	clientPkg := fs.String("client-package", "", "Go package name of the client (default: the last element of -client-out)")
	templatesDir := fs.String("templates", "", "directory of templates overriding the built-in phase scaffold")
	noScaffold := fs.Bool("no-scaffold", false, "do not write missing phase scaffolds")
	keyFormat := fs.String("key-format", "", "the key format of every operation that sets no key.format: any, uuid or raw (idemgen.key-format)")
	preset := fs.String("preset", "", "an API contract in one word: stripe (idemgen.preset)")
	keyMinLength := fs.Int("key-min-length", 0, "refuse keys shorter than this in every operation that sets no key.minLength (idemgen.key-min-length)")
	refusalSchema := fs.String("refusal-schema", "", "a schema of the spec (a components/schemas name) that is the API's own error object, documenting the refusals (idemgen.refusal-schema)")
	refusalMediaType := fs.String("refusal-media-type", "", "the refusals' media type with -refusal-schema; default application/json (idemgen.refusal-media-type)")
	refusalStatuses := statusFlag{}
	fs.Var(refusalStatuses, "refusal-status", "KIND=STATUS: another status for a refusal kind, e.g. key-reused=400; repeat for several (idemgen.refusal-statuses)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: idemgen generate [-config FILE] [flags] SPEC")
		fmt.Fprintln(stderr, "Reads oapi-codegen's configuration and runs it, then writes the idempotency glue and phase scaffolds beside its output.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "idemgen generate: pass one OpenAPI document, as the last argument")
		fs.Usage()
		return errUsage
	}
	cfg := &gen.Config{}
	if *configPath != "" {
		var err error
		if cfg, err = gen.LoadConfig(*configPath); err != nil {
			return err
		}
	}
	cfg.Spec = fs.Arg(0)
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&cfg.Codegen.PackageName, *pkg)
	if cfg.Output == "" {
		cfg.Output = *output
	}
	set(&cfg.OpenAPIOut, *openapiOut)
	set(&cfg.ClientOut, *clientOut)
	set(&cfg.ClientPackage, *clientPkg)
	set(&cfg.Templates, *templatesDir)
	set(&cfg.KeyFormat, *keyFormat)
	set(&cfg.Preset, *preset)
	if *keyMinLength != 0 {
		cfg.KeyMinLength = *keyMinLength
	}
	set(&cfg.RefusalSchema, *refusalSchema)
	set(&cfg.RefusalMediaType, *refusalMediaType)
	for kind, status := range refusalStatuses {
		if cfg.RefusalStatuses == nil {
			cfg.RefusalStatuses = map[string]int{}
		}
		cfg.RefusalStatuses[kind] = status
	}
	cfg.NoScaffold = cfg.NoScaffold || *noScaffold
	cfg.GlueOnly = cfg.GlueOnly || *glueOnly
	if err := cfg.Complete(); err != nil {
		return err
	}
	start := time.Now()
	if !*check {
		fmt.Fprintf(stderr, "idemgen: generating package %s from %s\n", cfg.Package(), cfg.Spec)
	}
	in, err := gen.Load(cfg, "")
	if err != nil {
		return specError(err, stderr)
	}
	res, err := gen.Generate(cfg, in)
	if err != nil {
		return specError(err, stderr)
	}
	if *check {
		diffs, err := gen.Diff(res, cfg.Dir())
		if err != nil {
			return err
		}
		for _, d := range diffs {
			fmt.Fprint(stdout, d)
		}
		if len(diffs) > 0 {
			return fmt.Errorf("%d generated file(s) differ from what %s produces; run go generate", len(diffs), cfg.Spec)
		}
		return nil
	}
	if err := gen.Write(res, cfg.Dir(), stderr); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "idemgen: done in %v\n", time.Since(start).Round(time.Millisecond))
	return nil
}

// statusFlag collects -refusal-status KIND=STATUS flags.
type statusFlag map[string]int

func (f statusFlag) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(f)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, f[k]))
	}
	return strings.Join(parts, ",")
}

func (f statusFlag) Set(v string) error {
	kind, status, ok := strings.Cut(v, "=")
	n, err := strconv.Atoi(status)
	if !ok || kind == "" || err != nil {
		return fmt.Errorf("%q: want KIND=STATUS, e.g. key-reused=400", v)
	}
	f[kind] = n
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
		fmt.Fprintln(stdout, "warning:", w)
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

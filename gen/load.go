package gen

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"text/template"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/util"

	"github.com/idemgen/idemgen/runtime/idemtype"
	"github.com/idemgen/idemgen/spec"
	"github.com/idemgen/idemgen/templates"
)

// Input is everything Generate reads besides the config, read from disk by
// Load: Generate itself touches no disk.
type Input struct {
	// Doc is the spec, loaded and its extensions validated.
	Doc *spec.Document
	// Sources are the Go files of the package that the user's own
	// oapi-codegen run wrote (glue-only mode), in name order.
	Sources []Source
	// UserTemplates are the config's oapi-codegen user templates, each
	// file's text read (oapi-codegen would read them while generating).
	UserTemplates map[string]string
	// Scaffold is the phase scaffold template, the user's override or the
	// built-in one.
	Scaffold *template.Template
	// OapiCodegen is the oapi-codegen version named in generated headers:
	// the one linked into this binary.
	OapiCodegen string
}

// Source is one Go file.
type Source struct {
	Name string
	Data []byte
}

// Load reads what cfg names: the spec (as oapi-codegen's command loads it:
// external references followed, allow-remote-refs-from honoured, the
// overlay applied), then its extensions validated; in glue-only mode the Go
// files oapi-codegen wrote beside Output; the user templates and the
// scaffold template. Relative paths are relative to wd ("" for the current
// directory), as oapi-codegen's are relative to the directory it runs in.
// Spec problems come back as spec.Errors.
func Load(cfg *Config, wd string) (*Input, error) {
	at := func(p string) string { return within(wd, p) }
	in := &Input{OapiCodegen: LinkedOapiCodegen()}
	if err := cfg.mustExist("templates", cfg.Templates, wd); err != nil {
		return nil, err
	}
	doc, data, err := LoadSpec(cfg, wd)
	if err != nil {
		return nil, err
	}
	if in.Doc, err = spec.Validate(cfg.Spec, data, doc); err != nil {
		return nil, err
	}
	applyKeyFormat(in.Doc, idemtype.KeyFormat(cfg.KeyFormat))
	if err := applyKeyMinLength(in.Doc, cfg.KeyMinLength); err != nil {
		return nil, err
	}
	if cfg.GlueOnly {
		if in.Sources, err = readPackage(at(cfg.Dir())); err != nil {
			return nil, err
		}
	}
	if in.UserTemplates, err = userTemplates(cfg.Codegen.OutputOptions.UserTemplates, at); err != nil {
		return nil, err
	}
	if in.Scaffold, err = templates.Load(templates.Scaffold, at(cfg.Templates)); err != nil {
		return nil, err
	}
	return in, nil
}

// applyKeyFormat gives every idempotent operation of doc that does not set
// key.format itself the config's key-format, if any.
func applyKeyFormat(doc *spec.Document, f idemtype.KeyFormat) {
	if f == "" {
		return
	}
	for _, op := range doc.Idempotent() {
		if !op.Idempotency.Key.FormatSet {
			op.Idempotency.Key.Format = f
		}
	}
}

// applyKeyMinLength gives every idempotent operation of doc that does not
// set key.minLength the config's key-min-length, if any; one whose
// key.maxLength is below it is an error.
func applyKeyMinLength(doc *spec.Document, n int) error {
	if n == 0 {
		return nil
	}
	var errs spec.Errors
	for _, op := range doc.Idempotent() {
		k := &op.Idempotency.Key
		switch {
		case k.MinLengthSet:
		case n > k.MaxLength:
			errs = append(errs, &spec.Error{File: doc.File, Method: op.Method, Path: op.Path, OperationID: op.OperationID, Field: spec.ExtensionName + ".key.maxLength",
				Message: fmt.Sprintf("%d is below the config's key-min-length %d: no key could be sent", k.MaxLength, n)})
		default:
			k.MinLength = n
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// within resolves p against wd, as a command run in wd would.
func within(wd, p string) string {
	if wd == "" || p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(wd, p)
}

// LoadSpec loads the spec as oapi-codegen's command does (its loader:
// external references followed, allow-remote-refs-from honoured, the
// overlay applied), relative to wd, without validating the extensions. It
// also returns the spec's text, which points errors at lines, or nil when an
// overlay was applied: an overlaid document is printed anew before it is
// loaded, so its lines are not the file's. Load calls it; make realspec
// times it.
func LoadSpec(cfg *Config, wd string) (*openapi3.T, []byte, error) {
	at := func(p string) string { return within(wd, p) }
	path := at(cfg.Spec)
	overlay := cfg.Codegen.OutputOptions.Overlay
	if err := cfg.mustExist("overlay", overlay.Path, wd); err != nil {
		return nil, nil, err
	}
	opts := util.LoadSwaggerWithOverlayOpts{Path: at(overlay.Path), Strict: true, AllowRemoteRefsFrom: cfg.Codegen.AllowRemoteRefsFrom}
	if overlay.Strict != nil {
		opts.Strict = *overlay.Strict
	}
	doc, err := util.LoadSwaggerWithOverlay(path, opts)
	if err != nil {
		return nil, nil, spec.Errors{&spec.Error{File: cfg.Spec, Message: "not a valid OpenAPI document: " + err.Error()}}
	}
	if doc.Paths == nil {
		doc.Paths = openapi3.NewPaths()
	}
	if overlay.Path != "" {
		return doc, nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return doc, data, nil
}

// userTemplates returns oapi-codegen's user templates with each one given as
// a file path (a single line) replaced by the file's text, read relative to
// wd. Other single lines are URLs, which oapi-codegen's own helper fetches.
func userTemplates(tmpls map[string]string, at func(string) string) (map[string]string, error) {
	if len(tmpls) == 0 {
		return nil, nil
	}
	out := maps.Clone(tmpls)
	for name, v := range tmpls {
		if strings.Contains(v, "\n") {
			continue
		}
		data, err := os.ReadFile(at(v))
		if errors.Is(err, fs.ErrNotExist) {
			var text string
			if text, err = codegen.GetUserTemplateText(v); err == nil {
				data = []byte(text)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("user template %q: %w", name, err)
		}
		if !bytes.Contains(data, []byte("\n")) {
			data = append(data, '\n') // text, not a path, to oapi-codegen
		}
		out[name] = string(data)
	}
	return out, nil
}

// readPackage reads the Go files of dir that a generator other than idemgen
// wrote: what the user's oapi-codegen run generated. Hand-written files and
// idemgen's own are left out, so that the user's phase files do not count as
// names declared by the spec.
func readPackage(dir string) ([]Source, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("glue-only: reading the package oapi-codegen generated: %w", err)
	}
	var out []Source
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if generated(data) && !bytes.HasPrefix(data, []byte(Header)) {
			out = append(out, Source{Name: name, Data: data})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// generated reports whether a Go file says it was generated, as Go's
// convention has it: a line `// Code generated ... DO NOT EDIT.` before the
// package clause.
func generated(src []byte) bool {
	i := bytes.Index(src, []byte("\npackage "))
	if i < 0 {
		return false
	}
	return headerPattern.Match(src[:i])
}

// oapiCodegenModule is the module whose generator idemgen links.
const oapiCodegenModule = "github.com/oapi-codegen/oapi-codegen/v2"

// OapiCodegenDep returns the oapi-codegen module among bi's dependencies,
// or nil.
func OapiCodegenDep(bi *debug.BuildInfo) *debug.Module {
	for _, d := range bi.Deps {
		if d.Path == oapiCodegenModule {
			return d
		}
	}
	return nil
}

// LinkedOapiCodegen returns the version of oapi-codegen linked into this
// binary, as its build information records it ("v2.8.2", with " => PATH
// VERSION" when replaced), or "(version unknown)" when the binary carries no
// module versions (test binaries do not).
func LinkedOapiCodegen() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(version unknown)"
	}
	d := OapiCodegenDep(bi)
	if d == nil {
		return "(version unknown)"
	}
	v := d.Version
	if r := d.Replace; r != nil {
		v += " => " + strings.TrimSpace(r.Path+" "+r.Version)
	}
	return v
}

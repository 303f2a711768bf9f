package gen

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"
	"go.yaml.in/yaml/v3"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Config says what to generate: oapi-codegen's configuration, read from
// oapi-codegen's own config file format, and idemgen's settings.
type Config struct {
	// Codegen is oapi-codegen's configuration: package, generate,
	// output-options (overlay and user templates included), import-mapping,
	// compatibility, additional-imports. Each option means what it means to
	// oapi-codegen.
	Codegen codegen.Configuration
	// Spec is the OpenAPI document, as given on the command line.
	Spec string
	// Output is oapi-codegen's output file (the config's output, or -o).
	// idemgen writes the glue and the phase scaffolds beside it; in glue-only
	// mode it reads the user's generated code from its directory.
	Output string
	// Settings are idemgen's own, from the config's idemgen section.
	Settings
	// ConfigDir is the directory of the config file LoadConfig read, as
	// its path was given ("" without a config file). The paths the file
	// names (output, output-options.overlay.path, file user-templates,
	// idemgen.templates) are relative to it, not to the working directory,
	// so that one config means the same files from wherever it is named:
	// LoadConfig joins them with it.
	ConfigDir string
}

// Settings are what the config's idemgen section holds: everything that is
// idemgen's rather than oapi-codegen's.
type Settings struct {
	// GlueOnly writes only the idempotency glue (idempotency.gen.go) and
	// the phase scaffolds, against the models and strict server the user's
	// own oapi-codegen run wrote into Output's directory.
	GlueOnly bool `yaml:"glue-only,omitempty"`
	// OpenAPIOut, when set, is where an enriched copy of the spec is written
	// (relative to Output's directory unless absolute): the Idempotency-Key
	// parameter and problem responses added to each idempotent operation.
	OpenAPIOut string `yaml:"openapi-out,omitempty"`
	// ClientOut, when set, is a directory (relative to Output's directory
	// unless absolute) that receives a client package: oapi-codegen's models
	// and typed client (client.gen.go), and IdempotentClient
	// (idempotent.gen.go), whose methods send each idempotent operation under
	// the intent's key and retry as runtime/idemclient says. The package
	// imports nothing of the server.
	ClientOut string `yaml:"client-out,omitempty"`
	// ClientPackage names the client package; default: ClientOut's last
	// element.
	ClientPackage string `yaml:"client-package,omitempty"`
	// Templates, when set, is a directory whose *.tmpl files override the
	// built-in scaffold templates of the same name.
	Templates string `yaml:"templates,omitempty"`
	// NoScaffold skips the user-owned phase scaffolds.
	NoScaffold bool `yaml:"no-scaffold,omitempty"`
	// RefusalSchema, when set, names the schema of the spec's components
	// that is the API's own error object: the enriched spec and the client
	// document the refusals (missing key, reused key, in flight, ...) with it,
	// as RefusalMediaType, instead of problem+json's IdempotencyProblem. The
	// service renders them so with idemapi.Contract.Refusals
	// (idemapi.JSONRefusals).
	RefusalSchema string `yaml:"refusal-schema,omitempty"`
	// RefusalMediaType is the refusals' media type with RefusalSchema;
	// default application/json.
	RefusalMediaType string `yaml:"refusal-media-type,omitempty"`
	// RefusalStatuses give refusal kinds other statuses (key-reused: 400),
	// in the enriched spec and the client, and in the RefusalStatuses the
	// glue declares for idemapi.JSONRefusals.
	RefusalStatuses map[string]int `yaml:"refusal-statuses,omitempty"`
	// KeyFormat is the key format of every operation that does not set
	// key.format itself: any (the default), uuid or raw.
	KeyFormat string `yaml:"key-format,omitempty"`
	// KeyMinLength is the key.minLength of every operation that does not
	// set it: shorter keys are refused (0: none).
	KeyMinLength int `yaml:"key-min-length,omitempty"`
	// Preset is an API contract its clients already know, in one line:
	// stripe (Stripe's key format, error object, statuses and headers; see
	// idempreset.Stripe). It fills in what the settings above leave unset.
	Preset string `yaml:"preset,omitempty"`
}

// PresetStripe is the preset of a Stripe-compatible API: keys in the raw
// format, refusals in Stripe's error object with its statuses (a reused
// key is 400), and the glue's Contract, idempreset.Stripe, for the engine.
const PresetStripe = "stripe"

// stripeRefusalStatuses are idempreset.StripeRefusalStatuses, which the
// generator does not import (TestStripePresetMatchesTheRuntime pins them).
var stripeRefusalStatuses = map[string]int{string(idemtype.KindMismatch): 400, string(idemtype.KindInFlight): 429, string(idemtype.KindUnavailable): 429}

// DefaultOutput is oapi-codegen's output file when neither the config nor
// the command line names one.
const DefaultOutput = "api.gen.go"

// GlueFile is the name of the idempotency glue, beside Output.
const GlueFile = "idempotency.gen.go"

// configFile is the config file: oapi-codegen's configuration as its
// command reads it (codegen.Configuration inline, plus the output file),
// and idemgen's section.
type configFile struct {
	codegen.Configuration `yaml:",inline"`
	Output                string    `yaml:"output,omitempty"`
	Idemgen               *Settings `yaml:"idemgen,omitempty"`
}

// LoadConfig reads the config file at path. It is the one config loader:
// the idemgen command and the golden tests both read their configs with it.
// The relative paths in the file are made relative to its directory (see
// Config.ConfigDir).
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("config file %s not found%s", path, resolvedAgainst("", path))
		}
		return nil, err
	}
	cfg, err := ParseConfig(path, data)
	if err != nil {
		return nil, err
	}
	cfg.ConfigDir = filepath.Dir(path)
	rebase := func(p *string) { *p = within(cfg.ConfigDir, *p) }
	if cfg.Output != "" {
		rebase(&cfg.Output)
	}
	rebase(&cfg.Codegen.OutputOptions.Overlay.Path)
	rebase(&cfg.Templates)
	for name, v := range cfg.Codegen.OutputOptions.UserTemplates {
		if !strings.Contains(v, "\n") && !strings.Contains(v, "://") {
			rebase(&v)
			cfg.Codegen.OutputOptions.UserTemplates[name] = v
		}
	}
	return cfg, nil
}

// resolvedAgainst says where a relative path that names no file was looked
// for: the absolute path, and why there: the config file's directory when p
// came from the config in configDir, the working directory otherwise.
func resolvedAgainst(configDir, p string) string {
	abs, err := filepath.Abs(p)
	if err != nil || filepath.IsAbs(p) {
		return ""
	}
	if configDir != "" && configDir != "." && strings.HasPrefix(p, configDir+string(filepath.Separator)) {
		d, _ := filepath.Abs(configDir)
		return fmt.Sprintf(" (looked for %s: paths in a config file are relative to its directory, %s)", abs, d)
	}
	wd, _ := os.Getwd()
	return fmt.Sprintf(" (looked for %s, relative to the working directory %s)", abs, wd)
}

// mustExist is nil when the file or directory the config names at p (kind
// says which setting) exists, relative to wd, and otherwise an error that
// names it and where it was looked for.
func (c *Config) mustExist(kind, p, wd string) error {
	if p == "" {
		return nil
	}
	if _, err := os.Stat(within(wd, p)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s %q not found%s", kind, p, resolvedAgainst(c.ConfigDir, within(wd, p)))
		}
		return err
	}
	return nil
}

// ParseConfig reads a config file's contents; path names it in errors.
// The format is oapi-codegen's (its current one: `generate` a mapping,
// `output` the file to write), with an optional `idemgen` section. Unknown
// fields are errors, as oapi-codegen's command makes them: a typo must not be
// silently ignored.
func ParseConfig(path string, data []byte) (*Config, error) {
	var f configFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w%s", path, err, configHint(data))
	}
	cfg := &Config{Codegen: f.Configuration, Output: f.Output}
	if f.Idemgen != nil {
		cfg.Settings = *f.Idemgen
	}
	if _, err := cfg.glueServer(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", path, lineOf(data, strings.SplitN(strings.TrimPrefix(err.Error(), "generate."), ":", 2)[0]+":"), err)
	}
	return cfg, nil
}

// lineOf is the line of data (from 1) where key first starts a line's
// content, or 1.
func lineOf(data []byte, key string) int {
	for i, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), key) {
			return i + 1
		}
	}
	return 1
}

// configHint recognises the two formats a config may be in by mistake and
// says how to move on.
func configHint(data []byte) string {
	var top map[string]any
	if yaml.Unmarshal(data, &top) != nil {
		return ""
	}
	if _, ok := top["spec"]; ok {
		return "\nThis is idemgen's earlier config format. idemgen now reads oapi-codegen's: pass the spec on the command line " +
			"(idemgen generate -config FILE SPEC), make output the file oapi-codegen writes (e.g. output: api.gen.go), " +
			"and move openapi-out, client-out, client-package, templates and no-scaffold under an idemgen: section " +
			"(docs/adopting.md, \"Configuration\")."
	}
	if _, ok := top["generate"].([]any); ok {
		return "\nThis is oapi-codegen's old config style (generate as a list), which idemgen does not read; " +
			"`oapi-codegen -old-config-style -config FILE -output-config SPEC` prints it in the current style."
	}
	return ""
}

// Complete fills in what the config leaves out and checks the result: the
// output file defaults to DefaultOutput; generate, when the config has none,
// to models and the echo strict server (what idemgen's glue needs, where
// oapi-codegen's default is models, echo server and embedded spec); the rest
// as oapi-codegen defaults and validates it.
func (c *Config) Complete() error {
	if c.Output == "" {
		c.Output = DefaultOutput
	}
	if strings.HasSuffix(c.Output, string(filepath.Separator)) || filepath.Ext(c.Output) != ".go" {
		return fmt.Errorf("output %q is the file oapi-codegen writes, and must end in .go (e.g. %s)", c.Output, filepath.Join(c.Output, DefaultOutput))
	}
	if reflect.ValueOf(c.Codegen.Generate).IsZero() {
		c.Codegen.Generate = codegen.GenerateOptions{EchoServer: true, Strict: true, Models: true}
	}
	c.Codegen = c.Codegen.UpdateDefaults()
	if c.Spec == "" {
		return errors.New("no spec: pass the OpenAPI document as the last argument, as to oapi-codegen")
	}
	if err := c.Codegen.Validate(); err != nil {
		return err
	}
	if !packageName.MatchString(c.Codegen.PackageName) {
		return fmt.Errorf("package name %q is not a valid Go package name", c.Codegen.PackageName)
	}
	for _, kind := range slices.Sorted(maps.Keys(c.RefusalStatuses)) {
		status := c.RefusalStatuses[kind]
		if !slices.Contains(idemtype.ErrorKinds(), idemtype.ErrorKind(kind)) {
			return fmt.Errorf("idemgen.refusal-statuses: %q is not a refusal kind; the kinds are %s", kind, kindList())
		}
		if status < 400 || status > 599 {
			return fmt.Errorf("idemgen.refusal-statuses: %s: %d is not a 4xx or 5xx status", kind, status)
		}
	}
	switch c.Preset {
	case "":
	case PresetStripe:
		c.KeyFormat = cmp.Or(c.KeyFormat, string(idemtype.KeyFormatRaw))
		for kind, status := range stripeRefusalStatuses {
			if _, ok := c.RefusalStatuses[kind]; !ok {
				if c.RefusalStatuses == nil {
					c.RefusalStatuses = map[string]int{}
				}
				c.RefusalStatuses[kind] = status
			}
		}
	default:
		return fmt.Errorf("idemgen.preset: %q is not a preset; the one preset is %s", c.Preset, PresetStripe)
	}
	if c.KeyFormat != "" {
		if _, err := idemtype.ParseKeyFormat(c.KeyFormat); err != nil {
			return fmt.Errorf("idemgen.key-format: %v", err)
		}
	}
	if c.KeyMinLength < 0 || c.KeyMinLength > 8192 {
		return fmt.Errorf("idemgen.key-min-length: %d is not 1 to 8192", c.KeyMinLength)
	}
	if c.RefusalMediaType != "" && c.RefusalSchema == "" {
		return errors.New("idemgen.refusal-media-type needs refusal-schema, the schema of the refusals in that media type")
	}
	return nil
}

// kindList is the refusal kinds, comma-separated.
func kindList() string {
	var names []string
	for _, k := range idemtype.ErrorKinds() {
		names = append(names, string(k))
	}
	return strings.Join(names, ", ")
}

var packageName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Dir is the directory of the generated package: Output's.
func (c *Config) Dir() string { return filepath.Dir(c.Output) }

// Package is the generated package's name.
func (c *Config) Package() string { return c.Codegen.PackageName }

// A server is a router oapi-codegen generates a strict server for that
// idemgen's glue serves.
type server string

const (
	serverEcho    server = "echo-server"
	serverStd     server = "std-http-server"
	serverChi     server = "chi-server"
	serverGorilla server = "gorilla-server"
	serverGin     server = "gin-server"
)

// supportedServers lists, for errors, the config choices the glue serves.
const supportedServers = "echo-server, std-http-server, chi-server, gorilla-server or gin-server, with strict-server"

// glueServer is the server the config has oapi-codegen generate, which
// the glue implements and registers with: "" when it generates no
// server. A server the glue cannot serve (fiber, iris, echo v5) is an
// error that lists those it can.
func (c *Config) glueServer() (server, error) {
	g := c.Codegen.Generate
	var s server
	switch {
	case g.EchoServer:
		s = serverEcho
	case g.StdHTTPServer:
		s = serverStd
	case g.ChiServer:
		s = serverChi
	case g.GorillaServer:
		s = serverGorilla
	case g.GinServer:
		s = serverGin
	case g.FiberServer, g.FiberV3Server, g.IrisServer, g.Echo5Server:
		name := map[bool]string{g.FiberServer: "fiber-server", g.FiberV3Server: "fiber-v3-server", g.IrisServer: "iris-server", g.Echo5Server: "echo5-server"}[true]
		return "", fmt.Errorf("generate.%s: idemgen's glue does not serve it; choose %s", name, supportedServers)
	default:
		return "", nil
	}
	if !g.Strict {
		return "", nil
	}
	return s, nil
}

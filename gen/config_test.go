package gen

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"

	"github.com/idemgen/idemgen/runtime/idempreset"
)

// TestParseConfig: oapi-codegen's fields land in oapi-codegen's type, ours
// in Settings; a config without generate gets the echo strict server.
func TestParseConfig(t *testing.T) {
	cfg, err := ParseConfig("c.yaml", []byte(`package: shop
output: internal/api/server.gen.go
generate: {models: true, echo-server: true, strict-server: true, embedded-spec: true}
compatibility: {old-aliasing: true}
output-options:
  response-type-suffix: Resp
  user-templates: {imports.tmpl: tmpl/imports.tmpl}
import-mapping: {common.yaml: example.com/common}
additional-imports: [{package: example.com/money, alias: money}]
idemgen:
  openapi-out: openapi.json
  no-scaffold: true
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Spec = "api.yaml"
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	c := cfg.Codegen
	if c.PackageName != "shop" || !c.Generate.EmbeddedSpec || !c.Compatibility.OldAliasing || c.OutputOptions.ResponseTypeSuffix != "Resp" ||
		c.ImportMapping["common.yaml"] != "example.com/common" || len(c.AdditionalImports) != 1 || c.AdditionalImports[0].Alias != "money" ||
		c.OutputOptions.UserTemplates["imports.tmpl"] != "tmpl/imports.tmpl" {
		t.Errorf("oapi-codegen's options: %+v", c)
	}
	if cfg.Dir() != "internal/api" || cfg.OpenAPIOut != "openapi.json" || !cfg.NoScaffold || cfg.GlueOnly {
		t.Errorf("idemgen's: dir %q, %+v", cfg.Dir(), cfg.Settings)
	}

	bare := &Config{Spec: "api.yaml"}
	bare.Codegen.PackageName = "api"
	if err := bare.Complete(); err != nil {
		t.Fatal(err)
	}
	if want := (codegen.GenerateOptions{EchoServer: true, Strict: true, Models: true}); bare.Codegen.Generate != want || bare.Output != DefaultOutput {
		t.Errorf("defaults: generate %+v, output %q", bare.Codegen.Generate, bare.Output)
	}
	for _, tc := range []struct{ config, want string }{
		{"package: api\noutput: gen\n", `output "gen" is the file oapi-codegen writes`},
		{"output: api.gen.go\n", "package name must be specified"},
		{"package: Api\n", `package name "Api" is not a valid Go package name`},
		{"package: api\ngenerate: {echo-server: true, chi-server: true}\n", "only one server type"},
	} {
		cfg, err := ParseConfig("c.yaml", []byte(tc.config))
		if err == nil {
			cfg.Spec = "api.yaml"
			err = cfg.Complete()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q", tc.config, err, tc.want)
		}
	}
	if _, err := ParseConfig("c.yaml", []byte("package: api\ngenerate: [types, server]\n")); err == nil || !strings.Contains(err.Error(), "-output-config") {
		t.Errorf("old config style: %v", err)
	}
}

// TestUserTemplates: a template given as a file path is read relative to
// the working directory, so that Generate need not read it; inline text is
// left as it is.
func TestUserTemplates(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "imports.tmpl"), []byte("{{/* mine */}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	inline := "{{/* inline */}}\nline two\n"
	got, err := userTemplates(map[string]string{"imports.tmpl": "imports.tmpl", "typedef.tmpl": inline}, func(p string) string { return within(dir, p) })
	if err != nil {
		t.Fatal(err)
	}
	if got["imports.tmpl"] != "{{/* mine */}}\n" || got["typedef.tmpl"] != inline {
		t.Errorf("got %q", got)
	}
	if _, err := userTemplates(map[string]string{"x.tmpl": filepath.Join(dir, "missing.tmpl")}, func(p string) string { return p }); err == nil {
		t.Error("a missing template file was accepted")
	}
}

// TestStripePresetMatchesTheRuntime: the statuses the stripe preset
// documents in the enriched spec and the client are the ones idempreset.Stripe
// answers with.
func TestStripePresetMatchesTheRuntime(t *testing.T) {
	runtime := map[string]int{}
	for kind, status := range idempreset.StripeRefusalStatuses() {
		runtime[string(kind)] = status
	}
	if !maps.Equal(runtime, stripeRefusalStatuses) {
		t.Errorf("the preset's statuses %v; the runtime's %v", stripeRefusalStatuses, runtime)
	}
	cfg, err := ParseConfig("c.yaml", []byte("package: api\nidemgen: {preset: stripe, refusal-statuses: {in-flight: 429}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Spec = "api.yaml"
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	if cfg.KeyFormat != "raw" || cfg.RefusalStatuses["key-reused"] != 400 || cfg.RefusalStatuses["in-flight"] != 429 {
		t.Errorf("preset stripe completed to key-format %q, refusal-statuses %v; want raw, key-reused 400 and the config's own in-flight 429", cfg.KeyFormat, cfg.RefusalStatuses)
	}
	cfg, _ = ParseConfig("c.yaml", []byte("package: api\nidemgen: {preset: paypal}\n"))
	cfg.Spec = "api.yaml"
	if err := cfg.Complete(); err == nil || !strings.Contains(err.Error(), "stripe") {
		t.Errorf("an unknown preset: %v; want an error naming the presets", err)
	}
}

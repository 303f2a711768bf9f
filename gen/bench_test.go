package gen

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"

	"github.com/idemgen/idemgen/internal/overlay"
	"github.com/idemgen/idemgen/spec"
	"github.com/idemgen/idemgen/templates"
)

var benchSpec = flag.String("realspec", "", "BenchmarkGenerate: also time this spec, with x-idempotency on every POST and PATCH (as make realspec)")

// BenchmarkGenerate times the generate path, from the spec file to every
// rendered file in memory. "golden" is the largest golden case (client) with
// every output on: server, client and the enriched copy of the spec. With
// -realspec PATH, "realspec/idemgen" does what make realspec times for
// idemgen, "realspec/idemgen+openapi-out" the same with the enriched copy,
// and "realspec/oapi-codegen" what make realspec times for oapi-codegen
// alone (models, echo and strict server) on the same document. Compare runs
// with benchstat; nothing here asserts a time.
func BenchmarkGenerate(b *testing.B) {
	dir := filepath.Join(goldenDir, "client")
	cfg, err := LoadConfig(filepath.Join(dir, "idemgen.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	cfg.Spec, cfg.OpenAPIOut = filepath.Join(dir, "api.yaml"), "openapi.json"
	if err := cfg.Complete(); err != nil {
		b.Fatal(err)
	}
	b.Run("golden", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			in, err := Load(cfg, "")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := Generate(cfg, in); err != nil {
				b.Fatal(err)
			}
		}
	})
	if *benchSpec == "" {
		return
	}
	for _, openapiOut := range []string{"", "openapi.json"} {
		name := "realspec/idemgen"
		if openapiOut != "" {
			name += "+openapi-out"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			cfg := &Config{Spec: *benchSpec, Output: filepath.Join(b.TempDir(), DefaultOutput), Settings: Settings{OpenAPIOut: openapiOut}}
			cfg.Codegen.PackageName = "api"
			if err := cfg.Complete(); err != nil {
				b.Fatal(err)
			}
			scaffold, err := templates.Load(templates.Scaffold, "")
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < b.N; i++ {
				doc, data, err := LoadSpec(cfg, "")
				if err != nil {
					b.Fatal(err)
				}
				overlay.Idempotent(doc)
				d, err := spec.Validate(cfg.Spec, data, doc)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := Generate(cfg, &Input{Doc: d, Scaffold: scaffold, OapiCodegen: "v0"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("realspec/oapi-codegen", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			loader := openapi3.NewLoader()
			loader.IsExternalRefsAllowed = true
			loader.IncludeOrigin = true
			doc, err := loader.LoadFromFile(*benchSpec)
			if err != nil {
				b.Fatal(err)
			}
			overlay.Idempotent(doc)
			if _, err := codegen.Generate(doc, codegen.Configuration{PackageName: "api",
				Generate: codegen.GenerateOptions{EchoServer: true, Strict: true, Models: true}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

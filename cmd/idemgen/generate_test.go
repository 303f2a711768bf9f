package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/util"

	"github.com/idemgen/idemgen/gen"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestGenerateReportsEverySpecError(t *testing.T) {
	code, _, errs := runCLI(t, "generate", "-package", "api", "-o", filepath.Join(t.TempDir(), "api.gen.go"), "../../golden/invalid_fields/api.yaml")
	if code != 1 {
		t.Fatalf("exit %d; want 1", code)
	}
	want, _ := os.ReadFile("../../golden/invalid_fields/stderr.txt")
	for _, line := range strings.Split(strings.TrimSpace(string(want)), "\n") {
		if !strings.Contains(errs, strings.TrimPrefix(line, "api.yaml")) {
			t.Errorf("stderr lacks %q", line)
		}
	}
	if !strings.Contains(errs, "18 problem(s) in the spec") {
		t.Errorf("no summary line in %q", errs)
	}
}

// userSpec is a spec split over two files, as oapi-codegen users write
// them: the request's schema is in common.yaml.
var userSpec = map[string]string{
	"api.yaml": `openapi: 3.0.3
info: {title: jobs, version: "1"}
paths:
  /jobs:
    post:
      operationId: startJob
      tags: [jobs]
      x-idempotency: true
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: 'common.yaml#/components/schemas/JobSpec'}
      responses:
        "202":
          description: accepted
          content:
            application/json:
              schema: {type: object, properties: {id: {type: string}}}
  /jobs/{id}:
    get:
      operationId: getJob
      tags: [jobs]
      parameters: [{name: id, in: path, required: true, schema: {type: string}}]
      responses:
        "200": {description: ok}
`,
	"common.yaml": `openapi: 3.0.3
info: {title: common, version: "1"}
paths: {}
components:
  schemas:
    JobSpec:
      type: object
      required: [kind]
      properties:
        kind: {type: string}
`,
}

// oapiConfig is what such a user's oapi-codegen.yaml says.
const oapiConfig = `package: jobs
output: server.gen.go
generate:
  models: true
  echo-server: true
  strict-server: true
output-options:
  name-normalizer: ToCamelCaseWithInitialisms
  exclude-operation-ids: [getJob]
import-mapping:
  common.yaml: example.com/shop/common
compatibility:
  always-prefix-enum-values: true
`

// TestGenerateWithOapiCodegenConfig: `idemgen generate -config
// oapi-codegen.yaml api.yaml` reads oapi-codegen's own file, writes its
// output file where it says (a file, not a directory), keeps the meaning of
// its options (the import mapping, an excluded operation), and puts the glue
// beside it.
func TestGenerateWithOapiCodegenConfig(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, userSpec)
	writeFiles(t, dir, map[string]string{"oapi-codegen.yaml": oapiConfig})
	t.Chdir(dir)
	code, _, errs := runCLI(t, "generate", "-config", "oapi-codegen.yaml", "api.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	server := readFile(t, "server.gen.go")
	for _, want := range []string{
		"// Models and echo strict server: oapi-codegen ",
		"\npackage jobs\n",
		"externalRef0 \"example.com/shop/common\"",
		"type StartJobJSONRequestBody = externalRef0.JobSpec",
	} {
		if !strings.Contains(server, want) {
			t.Errorf("server.gen.go lacks %q", want)
		}
	}
	if strings.Contains(server, "GetJob") {
		t.Error("server.gen.go has the operation exclude-operation-ids leaves out")
	}
	glue := readFile(t, "idempotency.gen.go")
	if !strings.Contains(glue, "operations := []string{\n\t\t\"startJob\",\n\t}\n") || strings.Contains(glue, "getJob") {
		t.Errorf("the glue does not serve exactly the generated operations:\n%s", glue)
	}
	if _, err := os.Stat("start_job_phases.go"); err != nil {
		t.Errorf("no scaffold beside the output: %v", err)
	}

	// A typo is an error, as it is to oapi-codegen.
	writeFiles(t, dir, map[string]string{"typo.yaml": "package: jobs\noutput-option: {}\n"})
	if code, _, errs := runCLI(t, "generate", "-config", "typo.yaml", "api.yaml"); code != 1 || !strings.Contains(errs, "field output-option not found") {
		t.Errorf("a config typo: exit %d, %q", code, errs)
	}
	// idemgen's earlier format gets the way forward.
	writeFiles(t, dir, map[string]string{"old.yaml": "spec: api.yaml\npackage: jobs\noutput: gen\n"})
	if code, _, errs := runCLI(t, "generate", "-config", "old.yaml", "api.yaml"); code != 1 || !strings.Contains(errs, "idemgen's earlier config format") {
		t.Errorf("the earlier format: exit %d, %q", code, errs)
	}
	// Without the import mapping, oapi-codegen's own error.
	writeFiles(t, dir, map[string]string{"nomap.yaml": "package: jobs\noutput: nomap/server.gen.go\n"})
	if code, _, errs := runCLI(t, "generate", "-config", "nomap.yaml", "api.yaml"); code != 1 || !strings.Contains(errs, "import-mapping") {
		t.Errorf("an unmapped external ref: exit %d, %q", code, errs)
	}
}

// TestGenerateOverGeneratedCode: a file oapi-codegen generated is rewritten
// (generated code is regenerated), a hand-written one never.
func TestGenerateOverGeneratedCode(t *testing.T) {
	dir := t.TempDir()
	spec, _ := os.ReadFile("../../golden/minimal_true/api.yaml")
	writeFiles(t, dir, map[string]string{
		"api.yaml":   string(spec),
		"api.gen.go": "// Package jobs provides primitives.\n//\n// Code generated by github.com/oapi-codegen/oapi-codegen/v2 version v2.8.2 DO NOT EDIT.\npackage jobs\n",
	})
	if code, _, errs := runCLI(t, "generate", "-package", "jobs", "-o", filepath.Join(dir, "api.gen.go"), filepath.Join(dir, "api.yaml")); code != 0 {
		t.Fatalf("over oapi-codegen's file: exit %d, %s", code, errs)
	}
	other := t.TempDir()
	writeFiles(t, other, map[string]string{"api.gen.go": "package jobs\n"})
	if code, _, errs := runCLI(t, "generate", "-package", "jobs", "-o", filepath.Join(other, "api.gen.go"), filepath.Join(dir, "api.yaml")); code != 1 || !strings.Contains(errs, "is not generated code") {
		t.Errorf("overwrote a hand-written file: exit %d, %q", code, errs)
	}
}

// TestGenerateGlueOnly: the user's oapi-codegen run writes the models and
// the strict server with their options; idemgen -glue-only writes only the
// glue and the scaffold, against those types, and leaves their file alone.
func TestGenerateGlueOnly(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, userSpec)
	writeFiles(t, dir, map[string]string{"oapi-codegen.yaml": oapiConfig})
	t.Chdir(dir)
	// What `oapi-codegen -config oapi-codegen.yaml api.yaml` writes: its
	// loader, its configuration type, its generator.
	cfg, err := gen.LoadConfig("oapi-codegen.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := util.LoadSwagger("api.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src, err := codegen.Generate(doc, cfg.Codegen)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"server.gen.go": src})

	code, _, errs := runCLI(t, "generate", "-glue-only", "-config", "oapi-codegen.yaml", "api.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if readFile(t, "server.gen.go") != src {
		t.Error("glue-only rewrote the user's oapi-codegen output")
	}
	glue := readFile(t, "idempotency.gen.go")
	for _, want := range []string{"StartJobRequestObject", "StartJobResponseObject", "VisitStartJobResponse"} {
		if !strings.Contains(glue, want) {
			t.Errorf("the glue lacks %s", want)
		}
	}
	if !strings.Contains(errs, "start_job_phases.go") || strings.Contains(errs, "server.gen.go") {
		t.Errorf("glue-only wrote other files than the glue and the scaffold:\n%s", errs)
	}

	// Without the user's strict server there is nothing to glue to.
	empty := t.TempDir()
	writeFiles(t, empty, userSpec)
	if code, _, errs := runCLI(t, "generate", "-glue-only", "-package", "jobs", "-o", filepath.Join(empty, "server.gen.go"), filepath.Join(empty, "api.yaml")); code != 1 || !strings.Contains(errs, "lacks StrictServerInterface") {
		t.Errorf("glue-only without oapi-codegen's output: exit %d, %q", code, errs)
	}
}

// TestGenerateCheck: -check writes nothing, is silent when the files are
// current, and prints a unified diff and exits 1 when they are not.
func TestGenerateCheck(t *testing.T) {
	dir := t.TempDir()
	spec, _ := os.ReadFile("../../golden/minimal_true/api.yaml")
	writeFiles(t, dir, map[string]string{"api.yaml": string(spec)})
	args := []string{"generate", "-package", "jobs", "-o", filepath.Join(dir, "api.gen.go"), filepath.Join(dir, "api.yaml")}
	if code, out, errs := runCLI(t, append([]string{"generate", "-check"}, args[1:]...)...); code != 1 || !strings.Contains(out, "+++ b/"+filepath.ToSlash(filepath.Join(dir, "idempotency.gen.go"))) || !strings.Contains(errs, "3 generated file(s) differ") {
		t.Errorf("-check before generating: exit %d\n%s\n%s", code, out, errs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("-check wrote files: %v", entries)
	}
	if code, _, errs := runCLI(t, args...); code != 0 {
		t.Fatalf("generate: exit %d: %s", code, errs)
	}
	if code, out, errs := runCLI(t, append([]string{"generate", "-check"}, args[1:]...)...); code != 0 || out != "" {
		t.Errorf("-check on current files: exit %d\n%s\n%s", code, out, errs)
	}
	// A hand edit of a generated file, and an edited scaffold.
	glue := filepath.Join(dir, "idempotency.gen.go")
	writeFiles(t, dir, map[string]string{"idempotency.gen.go": strings.Replace(readFile(t, glue), "Register serves", "Register (edited) serves", 1)})
	writeFiles(t, dir, map[string]string{"start_job_phases.go": readFile(t, filepath.Join(dir, "start_job_phases.go")) + "// mine\n"})
	code, out, errs := runCLI(t, append([]string{"generate", "-check"}, args[1:]...)...)
	if code != 1 || !strings.Contains(out, "-// Register (edited) serves") || !strings.Contains(out, "+// Register serves") ||
		strings.Contains(out, "phases.go") || !strings.Contains(errs, "1 generated file(s) differ") {
		t.Errorf("-check after an edit: exit %d\n%s\n%s", code, out, errs)
	}
}

func TestGenerateClient(t *testing.T) {
	dir := t.TempDir()
	spec, _ := os.ReadFile("../../golden/minimal_true/api.yaml")
	writeFiles(t, dir, map[string]string{
		"api.yaml":     string(spec),
		"idemgen.yaml": "package: jobs\noutput: gen/api.gen.go\nidemgen:\n  client-out: ../jobsclient\n",
	})
	t.Chdir(dir)
	code, _, errs := runCLI(t, "generate", "-config", "idemgen.yaml", "api.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, f := range []string{"gen/api.gen.go", "jobsclient/client.gen.go", "jobsclient/idempotent.gen.go"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Errorf("%s not written: %v", f, err)
			continue
		}
		if strings.HasPrefix(f, "jobsclient/") && !strings.Contains(string(data), "\npackage jobsclient\n") {
			t.Errorf("%s is not in package jobsclient", f)
		}
	}
	// The flag overrides the config; a directory that is no package name needs -client-package.
	code, _, errs = runCLI(t, "generate", "-config", "idemgen.yaml", "-client-out", "../jobs-client", "api.yaml")
	if code != 1 || !strings.Contains(errs, "set client-package") {
		t.Errorf("client dir not a package name: exit %d, %q", code, errs)
	}
	code, _, errs = runCLI(t, "generate", "-config", "idemgen.yaml", "-client-out", "../jobs-client", "-client-package", "jobsapi", "api.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "jobs-client", "idempotent.gen.go")); err != nil || !strings.Contains(string(data), "\npackage jobsapi\n") {
		t.Errorf("-client-package: %v", err)
	}
}

// TestConfigPathsRelativeToTheConfig: the paths a config file names
// (output, overlay, templates) resolve against the config file's directory,
// so that `generate -check -config api/idemgen.yaml api/api.yaml` from the
// module root agrees with the `go generate` run in api/. A missing overlay
// is an error that names the file and the directory it was looked for in.
func TestConfigPathsRelativeToTheConfig(t *testing.T) {
	dir := t.TempDir()
	spec, _ := os.ReadFile("../../golden/minimal_true/api.yaml")
	overlay := "overlay: 1.0.0\ninfo: {title: retitle, version: \"1\"}\nactions:\n  - target: $.info\n    update: {title: overlaid}\n"
	writeFiles(t, dir, map[string]string{
		"api/api.yaml":       string(spec),
		"api/overlay.yaml":   overlay,
		"api/idemgen.yaml":   "package: jobs\noutput: gen/api.gen.go\noutput-options:\n  overlay: {path: overlay.yaml}\n",
		"api/missing.yaml":   "package: jobs\noutput: gen/api.gen.go\noutput-options:\n  overlay: {path: nowhere.yaml}\n",
		"api/templates.yaml": "package: jobs\noutput: gen/api.gen.go\nidemgen:\n  templates: tmpl\n",
	})
	t.Chdir(filepath.Join(dir, "api"))
	if code, _, errs := runCLI(t, "generate", "-config", "idemgen.yaml", "api.yaml"); code != 0 {
		t.Fatalf("generate in api/: exit %d: %s", code, errs)
	}
	t.Chdir(dir)
	if code, out, errs := runCLI(t, "generate", "-check", "-config", "api/idemgen.yaml", "api/api.yaml"); code != 0 || out != "" {
		t.Errorf("-check from the root: exit %d\n%.2000s\n%s", code, out, errs)
	}
	if code, _, errs := runCLI(t, "generate", "-check", "-config", "api/missing.yaml", "api/api.yaml"); code != 1 ||
		!strings.Contains(errs, `overlay "api/nowhere.yaml" not found`) || !strings.Contains(errs, filepath.Join(dir, "api")) {
		t.Errorf("a missing overlay: exit %d, %q", code, errs)
	}
	if code, _, errs := runCLI(t, "generate", "-check", "-config", "api/templates.yaml", "api/api.yaml"); code != 1 ||
		!strings.Contains(errs, `templates "api/tmpl" not found`) || !strings.Contains(errs, filepath.Join(dir, "api")) {
		t.Errorf("a missing templates directory: exit %d, %q", code, errs)
	}
	if code, _, errs := runCLI(t, "generate", "-config", "api/nothere.yaml", "api/api.yaml"); code != 1 ||
		!strings.Contains(errs, "api/nothere.yaml") || !strings.Contains(errs, dir) {
		t.Errorf("a missing config: exit %d, %q", code, errs)
	}
}

// TestEverySettingHasAFlag: each setting of the config's idemgen section
// has a flag of the same name, so that a config oapi-codegen also reads
// (which refuses the section) can keep every idemgen setting out of it.
func TestEverySettingHasAFlag(t *testing.T) {
	_, _, usage := runCLI(t, "generate", "-h")
	st := reflect.TypeFor[gen.Settings]()
	for i := range st.NumField() {
		name, _, _ := strings.Cut(st.Field(i).Tag.Get("yaml"), ",")
		flag := name
		if name == "refusal-statuses" {
			flag = "refusal-status" // one flag per kind, repeated
		}
		if !strings.Contains(usage, "  -"+flag+" ") && !strings.Contains(usage, "  -"+flag+"\n") {
			t.Errorf("idemgen.%s has no -%s flag", name, flag)
		}
	}
}

// TestFlagsSetWhatTheSectionSets: golden/refusal_schema generated from a
// config without its idemgen section, the settings given as flags instead,
// is the golden output, file for file.
func TestFlagsSetWhatTheSectionSets(t *testing.T) {
	golden := filepath.Join("..", "..", "golden", "refusal_schema")
	dir := t.TempDir()
	spec, err := os.ReadFile(filepath.Join(golden, "api.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile(filepath.Join(golden, "idemgen.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	plain, _, ok := strings.Cut(string(config), "idemgen:\n")
	if !ok {
		t.Fatal("golden/refusal_schema's config has no idemgen section")
	}
	writeFiles(t, dir, map[string]string{"api.yaml": string(spec), "oapi-codegen.yaml": plain})
	code, _, errs := runCLI(t, "generate", "-config", filepath.Join(dir, "oapi-codegen.yaml"),
		"-openapi-out", "openapi.enriched.yaml", "-client-out", "chargeclient",
		"-refusal-schema", "Error", "-refusal-status", "key-reused=400", filepath.Join(dir, "api.yaml"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	want := filepath.Join(golden, "out")
	err = filepath.WalkDir(want, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(want, path)
		w, _ := os.ReadFile(path)
		got, rerr := os.ReadFile(filepath.Join(dir, rel))
		// The header names the source as the command line gave it.
		if rerr != nil || string(got) != string(w) && !sameButSource(string(got), string(w)) {
			t.Errorf("%s differs from the golden output (%v)", rel, rerr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sameButSource reports whether two generated files differ only in their
// "Source:" line.
func sameButSource(a, b string) bool {
	strip := func(s string) string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if !strings.HasPrefix(l, "// Source: ") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	return strip(a) == strip(b)
}

// TestStaleScaffoldIsWarnedOf: after the spec's phases change, go generate
// keeps the user's scaffold and warns, naming each method: a phase with
// no method, a method written for another kind of phase, a method that is
// no phase any more.
func TestStaleScaffoldIsWarnedOf(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"api.yaml": strings.Replace(userSpec["api.yaml"], "{$ref: 'common.yaml#/components/schemas/JobSpec'}", "{type: object}", 1)})
	t.Chdir(dir)
	gen := func() string { t.Helper(); return generateJobs(t) }
	if out := gen(); strings.Contains(out, "warning") {
		t.Fatalf("a fresh scaffold is warned of:\n%s", out)
	}
	if out := gen(); !strings.Contains(out, "kept") || strings.Contains(out, "warning") {
		t.Fatalf("an unchanged spec: %s", out)
	}
	spec := readFile(t, "api.yaml")
	spec = strings.Replace(spec, "x-idempotency: true", "x-idempotency:\n        phases: [{name: enqueue, foreign: true}, {name: execute, foreign: false}, record]", 1)
	writeFiles(t, dir, map[string]string{"api.yaml": spec})
	out := gen()
	for _, want := range []string{
		"StartJobImpl has no method Enqueue for phase 1 of startJob, \"enqueue\" (foreign)",
		"StartJobImpl.Execute is not written as phase \"execute\" is now (local",
		"StartJobImpl has no method Record for phase 3 of startJob, \"record\" (final)",
	} {
		if !strings.Contains(out, "warning   start_job_phases.go: "+want) && !strings.Contains(out, want) {
			t.Errorf("no warning %q in:\n%s", want, out)
		}
	}
	spec = strings.Replace(spec, "phases: [{name: enqueue, foreign: true}, {name: execute, foreign: false}, record]", "phases: [run]", 1)
	writeFiles(t, dir, map[string]string{"api.yaml": spec})
	if out := gen(); !strings.Contains(out, "StartJobImpl.Execute is shaped as a phase but startJob has no such phase (its phases: run)") {
		t.Errorf("a renamed phase is not warned of:\n%s", out)
	}
}

// TestRenderTurnedOffKeepsItsMethod: a spec that turns replay.render off
// keeps the scaffold's Render method without a warning (it renders the
// records stored while render was on, through idem.KeptRender), and the
// glue passes it on.
func TestRenderTurnedOffKeepsItsMethod(t *testing.T) {
	dir := t.TempDir()
	spec := strings.Replace(userSpec["api.yaml"], "{$ref: 'common.yaml#/components/schemas/JobSpec'}", "{type: object}", 1)
	writeFiles(t, dir, map[string]string{"api.yaml": strings.Replace(spec, "x-idempotency: true", "x-idempotency: {replay: {render: [/id]}}", 1)})
	t.Chdir(dir)
	gen := func() string { t.Helper(); return generateJobs(t) }
	gen()
	if !strings.Contains(readFile(t, "start_job_phases.go"), ") Render(") {
		t.Fatal("the scaffold of an operation that renders has no Render")
	}
	writeFiles(t, dir, map[string]string{"api.yaml": spec})
	if out := gen(); strings.Contains(out, "warning") {
		t.Errorf("render turned off, the kept Render is warned of:\n%s", out)
	}
	if glue := readFile(t, "idempotency.gen.go"); !strings.Contains(glue, "Render: idem.KeptRender(p,") {
		t.Errorf("the glue of an operation that does not render passes no kept Render")
	}
}

// generateJobs runs idemgen generate on the working directory's api.yaml
// as package jobs, and returns what it printed on stderr.
func generateJobs(t *testing.T) string {
	t.Helper()
	code, _, errs := runCLI(t, "generate", "-package", "jobs", "-o", "api.gen.go", "api.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	return errs
}

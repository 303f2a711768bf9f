// Command realspec checks the generator against a real-world spec: it adds
// x-idempotency to every POST and PATCH in memory (an overlay; the file is
// not changed), generates into a temporary module, and compiles it. It also
// times idemgen against oapi-codegen alone on the same spec, side by side in
// one run: each from the spec file to the code, as their commands do, and
// the part of that after the spec is loaded. Run it with
// `make realspec SPEC=path`; docs/performance.md has the figures.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"

	"github.com/idemgen/idemgen/gen"
	"github.com/idemgen/idemgen/internal/overlay"
	"github.com/idemgen/idemgen/internal/tempmod"
	"github.com/idemgen/idemgen/spec"
	"github.com/idemgen/idemgen/templates"
)

func main() {
	specPath := flag.String("spec", "", "the OpenAPI document")
	withOverlay := flag.Bool("overlay", true, "add x-idempotency: true to every POST and PATCH that lacks it")
	runs := flag.Int("runs", 11, "timed generations of each kind (the median is reported); on a busy machine fewer runs move the ratio by 10% either way")
	keep := flag.Bool("keep", false, "keep the temporary module and print its path")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the timed runs (both kinds) to this file")
	verbose := flag.Bool("v", false, "print the times of every run, not only the medians")
	flag.Parse()
	if *specPath == "" {
		fmt.Fprintln(os.Stderr, "usage: realspec -spec PATH [-overlay=false] [-runs N] [-keep] [-cpuprofile FILE] [-v]")
		os.Exit(2)
	}
	if err := run(*specPath, *withOverlay, *runs, *keep, *cpuProfile, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "realspec:", err)
		os.Exit(1)
	}
}

// timing is one run's clock: total from the spec file to the generated
// source, and the part of it after the spec was loaded.
type timing struct{ total, gen time.Duration }

// oapiCodegen does what oapi-codegen's command does with the spec (v2.8.2,
// cmd/oapi-codegen and pkg/util's loader: external references allowed,
// origins recorded), for the output idemgen builds on: models, echo server
// and strict server. The overlay is applied to the loaded document, as it is
// for idemgen, so that both generate from the same document.
func oapiCodegen(path string, withOverlay bool) (timing, error) {
	start := time.Now()
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = true
	loader.IncludeOrigin = true
	doc, err := loader.LoadFromFile(path)
	if err != nil {
		return timing{}, err
	}
	if withOverlay {
		overlay.Idempotent(doc)
	}
	loaded := time.Now()
	if _, err := codegen.Generate(doc, codegen.Configuration{PackageName: "api",
		Generate: codegen.GenerateOptions{EchoServer: true, Strict: true, Models: true}}); err != nil {
		return timing{}, fmt.Errorf("oapi-codegen alone: %w", err)
	}
	end := time.Now()
	return timing{total: end.Sub(start), gen: end.Sub(loaded)}, nil
}

// counts describes the spec: operations, idempotent ones, and how many of
// those the overlay made idempotent.
type counts struct{ ops, idempotent, added int }

// idemgen does what `idemgen generate` does (gen.LoadSpec, spec.Validate,
// gen.Generate), with the overlay applied to the one loaded document before
// its extensions are validated.
func idemgen(cfg *gen.Config, withOverlay bool) (*gen.Result, counts, timing, error) {
	start := time.Now()
	doc, data, err := gen.LoadSpec(cfg, "")
	if err != nil {
		return nil, counts{}, timing{}, err
	}
	added := 0
	if withOverlay {
		added = overlay.Idempotent(doc)
	}
	loaded := time.Now()
	d, err := spec.Validate(cfg.Spec, data, doc)
	if err != nil {
		return nil, counts{}, timing{}, err
	}
	scaffold, err := templates.Load(templates.Scaffold, "")
	if err != nil {
		return nil, counts{}, timing{}, err
	}
	res, err := gen.Generate(cfg, &gen.Input{Doc: d, Scaffold: scaffold, OapiCodegen: gen.LinkedOapiCodegen()})
	if err != nil {
		return nil, counts{}, timing{}, err
	}
	end := time.Now()
	return res, counts{len(d.Operations), len(d.Idempotent()), added}, timing{total: end.Sub(start), gen: end.Sub(loaded)}, nil
}

func median(ts []timing, f func(timing) time.Duration) time.Duration {
	ds := make([]time.Duration, len(ts))
	for i, t := range ts {
		ds[i] = f(t)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

func run(path string, withOverlay bool, runs int, keep bool, cpuProfile string, verbose bool) error {
	dir, err := os.MkdirTemp("", "realspec-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("module:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	cfg := &gen.Config{Spec: path, Output: filepath.Join(dir, "api", gen.DefaultOutput)}
	cfg.Codegen.PackageName = "api"
	if err := cfg.Complete(); err != nil {
		return err
	}
	var oapiTimes, idemTimes []timing
	var res *gen.Result
	var c counts
	for i := 0; i < runs; i++ {
		// Alternate the two so that neither gets a warmer machine, and
		// start each as a command starts, from a collected heap whose
		// memory went back to the system: neither pays for the other's
		// garbage or reuses the pages the other faulted in.
		debug.FreeOSMemory()
		t, err := oapiCodegen(path, withOverlay)
		if err != nil {
			return err
		}
		oapiTimes = append(oapiTimes, t)
		res = nil // what each run keeps alive is its own
		debug.FreeOSMemory()
		res, c, t, err = idemgen(cfg, withOverlay)
		if err != nil {
			return err
		}
		idemTimes = append(idemTimes, t)
		if verbose {
			o := oapiTimes[i]
			fmt.Printf("run %d: oapi-codegen alone %v (generation %v), idemgen %v (generation %v): %.2fx (%.2fx)\n", i+1,
				o.total.Round(time.Millisecond), o.gen.Round(time.Millisecond), t.total.Round(time.Millisecond), t.gen.Round(time.Millisecond),
				float64(t.total)/float64(o.total), float64(t.gen)/float64(o.gen))
		}
	}
	if cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	fmt.Printf("spec %s: %d operations, %d idempotent (%d added by the overlay)\n", path, c.ops, c.idempotent, c.added)
	total := func(t timing) time.Duration { return t.total }
	o, g := median(oapiTimes, total), median(idemTimes, total)
	fmt.Printf("spec to code, median of %d: oapi-codegen alone %v, idemgen %v (oapi-codegen included): %.2fx\n",
		runs, o.Round(time.Millisecond), g.Round(time.Millisecond), float64(g)/float64(o))
	generation := func(t timing) time.Duration { return t.gen }
	o, g = median(oapiTimes, generation), median(idemTimes, generation)
	fmt.Printf("  of which generation from the loaded document: oapi-codegen alone %v, idemgen %v: %.2fx\n",
		o.Round(time.Millisecond), g.Round(time.Millisecond), float64(g)/float64(o))
	if err := tempmod.New(dir, "example.test/realspec"); err != nil {
		return err
	}
	if err := gen.Write(res, cfg.Dir(), os.Stderr); err != nil {
		return err
	}
	start := time.Now()
	if out, err := tempmod.Go(dir, "vet", "./..."); err != nil {
		return fmt.Errorf("the generated module does not compile:\n%s%w", out, err)
	}
	fmt.Printf("compiled and vetted the generated module in %v\n", time.Since(start).Round(time.Millisecond))
	return nil
}

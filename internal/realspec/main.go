// Command realspec checks the generator against a real-world spec: it adds
// x-idempotency to every POST and PATCH in memory (the file is not
// changed), after the user's own overlay if one is given, generates into a
// temporary module, and builds it. It also times idemgen against
// oapi-codegen alone on the same spec: each side runs as a process of its
// own, as their commands do, alternating, and reports the time from the
// spec file to the code, the part of it after the spec is loaded, and the
// process's peak memory (its maximum resident set). Run it with
// `make realspec SPEC=path [OVERLAY=file] [CONFIG=file] [RUNS=n]`;
// docs/performance.md has the figures.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"

	"github.com/idemgen/idemgen/gen"
	"github.com/idemgen/idemgen/internal/overlay"
	"github.com/idemgen/idemgen/internal/tempmod"
	"github.com/idemgen/idemgen/spec"
	"github.com/idemgen/idemgen/templates"
)

func main() {
	specPath := flag.String("spec", "", "the OpenAPI document")
	userOverlay := flag.String("overlay", "", "an OpenAPI Overlay to apply first (Go names, say), as the config's output-options.overlay does")
	configPath := flag.String("config", "", "an oapi-codegen config (idemgen's format) to generate with; its output is replaced by the temporary module's")
	idempotent := flag.Bool("idempotent", true, "add x-idempotency: true to every POST and PATCH that lacks it")
	runs := flag.Int("runs", 5, "timed runs of each side (the median is reported); each run is a process")
	keep := flag.Bool("keep", false, "keep the temporary module and print its path")
	verbose := flag.Bool("v", false, "print every run, not only the medians")
	child := flag.String("side", "", "internal: run one side once (idemgen or oapi-codegen) and print its timing")
	dir := flag.String("dir", "", "internal: the module directory the idemgen side writes into")
	flag.Parse()
	if *specPath == "" {
		fmt.Fprintln(os.Stderr, "usage: realspec -spec PATH [-overlay FILE] [-config FILE] [-idempotent=false] [-runs N] [-keep] [-v]")
		os.Exit(2)
	}
	cfg, err := config(*specPath, *userOverlay, *configPath, *dir)
	if err == nil {
		if *child != "" {
			err = side(*child, cfg, *idempotent)
		} else {
			err = run(cfg, *runs, *keep, *verbose)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "realspec:", err)
		os.Exit(1)
	}
}

// config is what both sides generate from: the user's config (or the
// default, models and the echo strict server), the spec, the overlay, and
// an output in dir's api package.
func config(specPath, userOverlay, configPath, dir string) (*gen.Config, error) {
	cfg := &gen.Config{}
	if configPath != "" {
		var err error
		if cfg, err = gen.LoadConfig(configPath); err != nil {
			return nil, err
		}
		// Only the Go package the temporary module builds: no client or
		// enriched copy to write beside it.
		cfg.ClientOut, cfg.OpenAPIOut, cfg.GlueOnly = "", "", false
	}
	cfg.Spec = specPath
	if cfg.Codegen.PackageName == "" {
		cfg.Codegen.PackageName = "api"
	}
	if userOverlay != "" {
		cfg.Codegen.OutputOptions.Overlay.Path = userOverlay
	}
	cfg.Output = filepath.Join(dir, "api", gen.DefaultOutput)
	return cfg, cfg.Complete()
}

// timing is one run of one side: total from the spec file to the generated
// source, the part of it after the spec was loaded, the process's peak
// resident memory, and what the spec held.
type timing struct {
	Total, Gen       time.Duration
	PeakRSS          int64 // bytes
	Ops, Idempotent  int
	AddedIdempotency int
}

// side runs one side once, as its command would, and prints its timing as
// JSON on stdout; the idemgen side writes what it generated into the
// config's output directory.
func side(which string, cfg *gen.Config, idempotent bool) error {
	start := time.Now()
	doc, data, err := gen.LoadSpec(cfg, "")
	if err != nil {
		return err
	}
	added := 0
	if idempotent {
		added = overlay.Idempotent(doc)
	}
	loaded := time.Now()
	var t timing
	switch which {
	case "oapi-codegen":
		// What oapi-codegen's command does once it has loaded the spec
		// (with the same loader, overlay applied).
		if _, err := codegen.Generate(doc, cfg.Codegen); err != nil {
			return fmt.Errorf("oapi-codegen alone: %w", err)
		}
	case "idemgen":
		d, err := spec.Validate(cfg.Spec, data, doc)
		if err != nil {
			return err
		}
		scaffold, err := templates.Load(templates.Scaffold, "")
		if err != nil {
			return err
		}
		res, err := gen.Generate(cfg, &gen.Input{Doc: d, Scaffold: scaffold, OapiCodegen: gen.LinkedOapiCodegen()})
		if err != nil {
			return err
		}
		t.Ops, t.Idempotent = len(d.Operations), len(d.Idempotent())
		end := time.Now()
		if err := gen.Write(res, cfg.Dir(), io.Discard); err != nil {
			return err
		}
		t.Total, t.Gen, t.AddedIdempotency = end.Sub(start), end.Sub(loaded), added
		return json.NewEncoder(os.Stdout).Encode(t)
	default:
		return fmt.Errorf("-side %q: want idemgen or oapi-codegen", which)
	}
	end := time.Now()
	t.Total, t.Gen, t.AddedIdempotency = end.Sub(start), end.Sub(loaded), added
	return json.NewEncoder(os.Stdout).Encode(t)
}

// runSide runs one side in a process of its own and returns its timing,
// with its peak memory from the kernel's accounting.
func runSide(which string, args []string) (timing, error) {
	self, err := os.Executable()
	if err != nil {
		return timing{}, err
	}
	cmd := exec.Command(self, append([]string{"-side", which}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return timing{}, fmt.Errorf("%s: %w\n%s", which, err, errb.Bytes())
	}
	var t timing
	if err := json.Unmarshal(out.Bytes(), &t); err != nil {
		return timing{}, fmt.Errorf("%s printed %q: %w", which, out.Bytes(), err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		t.PeakRSS = ru.Maxrss * 1024 // kilobytes on Linux
	}
	return t, nil
}

func median[T int64 | time.Duration](ts []timing, f func(timing) T) T {
	vs := make([]T, len(ts))
	for i, t := range ts {
		vs[i] = f(t)
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
	return vs[len(vs)/2]
}

func run(cfg *gen.Config, runs int, keep, verbose bool) error {
	if runs < 1 {
		return fmt.Errorf("-runs %d: want at least 1", runs)
	}
	dir, err := os.MkdirTemp("", "realspec-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("module:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	// The children get the flags this process got, and the module to
	// write into.
	var args []string
	flag.Visit(func(f *flag.Flag) {
		if f.Name != "runs" && f.Name != "keep" && f.Name != "v" {
			args = append(args, "-"+f.Name+"="+f.Value.String())
		}
	})
	args = append(args, "-dir="+dir)
	var oapiRuns, idemRuns []timing
	for i := 0; i < runs; i++ {
		// Alternate, so that neither side gets a warmer machine.
		o, err := runSide("oapi-codegen", args)
		if err != nil {
			return err
		}
		g, err := runSide("idemgen", args)
		if err != nil {
			return err
		}
		oapiRuns, idemRuns = append(oapiRuns, o), append(idemRuns, g)
		if verbose {
			fmt.Printf("run %d: oapi-codegen alone %v (generation %v, peak %s), idemgen %v (generation %v, peak %s): %.2fx\n", i+1,
				o.Total.Round(time.Millisecond), o.Gen.Round(time.Millisecond), mib(o.PeakRSS),
				g.Total.Round(time.Millisecond), g.Gen.Round(time.Millisecond), mib(g.PeakRSS), float64(g.Total)/float64(o.Total))
		}
	}
	last := idemRuns[len(idemRuns)-1]
	fmt.Printf("spec %s: %d operations, %d idempotent (%d added in memory)\n", cfg.Spec, last.Ops, last.Idempotent, last.AddedIdempotency)
	total := func(t timing) time.Duration { return t.Total }
	generation := func(t timing) time.Duration { return t.Gen }
	peak := func(t timing) int64 { return t.PeakRSS }
	o, g := median(oapiRuns, total), median(idemRuns, total)
	fmt.Printf("spec to code, median of %d processes each: oapi-codegen alone %v, idemgen %v (oapi-codegen included): %.2fx\n",
		runs, o.Round(time.Millisecond), g.Round(time.Millisecond), float64(g)/float64(o))
	o, g = median(oapiRuns, generation), median(idemRuns, generation)
	fmt.Printf("  of which generation from the loaded document: oapi-codegen alone %v, idemgen %v: %.2fx\n",
		o.Round(time.Millisecond), g.Round(time.Millisecond), float64(g)/float64(o))
	po, pg := median(oapiRuns, peak), median(idemRuns, peak)
	fmt.Printf("peak memory (maximum resident set), median: oapi-codegen alone %s, idemgen %s: %.2fx\n", mib(po), mib(pg), float64(pg)/float64(po))
	if err := tempmod.New(dir, "example.test/realspec"); err != nil {
		return err
	}
	start := time.Now()
	if out, err := tempmod.Go(dir, "build", "./..."); err != nil {
		return fmt.Errorf("the generated module does not build:\n%s%w", out, err)
	}
	fmt.Printf("built the generated module (go build ./...) in %v\n", time.Since(start).Round(time.Millisecond))
	return nil
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

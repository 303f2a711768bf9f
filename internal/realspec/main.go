// Command realspec checks the generator against a real-world spec: it adds
// x-idempotency to every POST and PATCH in memory (an overlay; the file is
// not changed), generates into a temporary module, and compiles it. It also
// times generation against oapi-codegen alone on the same document, side by
// side in one run. Run it with `make realspec SPEC=path`.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"

	"github.com/idemgen/idemgen/gen"
	"github.com/idemgen/idemgen/internal/tempmod"
	"github.com/idemgen/idemgen/spec"
)

func main() {
	specPath := flag.String("spec", "", "the OpenAPI document")
	overlay := flag.Bool("overlay", true, "add x-idempotency: true to every POST and PATCH that lacks it")
	runs := flag.Int("runs", 5, "timed generations of each kind (the median is reported)")
	keep := flag.Bool("keep", false, "keep the temporary module and print its path")
	flag.Parse()
	if *specPath == "" {
		fmt.Fprintln(os.Stderr, "usage: realspec -spec PATH [-overlay=false] [-runs N] [-keep]")
		os.Exit(2)
	}
	if err := run(*specPath, *overlay, *runs, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "realspec:", err)
		os.Exit(1)
	}
}

func load(path string, overlay bool) ([]byte, *openapi3.T, int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, 0, err
	}
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = true
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, nil, 0, err
	}
	added := 0
	if overlay {
		for _, p := range doc.Paths.InMatchingOrder() {
			for _, op := range []*openapi3.Operation{doc.Paths.Value(p).Post, doc.Paths.Value(p).Patch} {
				if op == nil {
					continue
				}
				if _, ok := op.Extensions[spec.ExtensionName]; !ok {
					if op.Extensions == nil {
						op.Extensions = map[string]any{}
					}
					op.Extensions[spec.ExtensionName] = true
					added++
				}
			}
		}
	}
	return data, doc, added, nil
}

func median(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

func run(path string, overlay bool, runs int, keep bool) error {
	dir, err := os.MkdirTemp("", "realspec-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("module:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	cfg := gen.Config{Spec: path, Package: "api", Output: filepath.Join(dir, "api")}
	var oapiTimes, idemTimes []time.Duration
	var res *gen.Result
	var added, idempotent, ops int
	for i := 0; i < runs; i++ {
		// Alternate the two so that neither gets a warmer machine.
		_, doc, _, err := load(path, overlay)
		if err != nil {
			return err
		}
		start := time.Now()
		if _, err := codegen.Generate(doc, codegen.Configuration{PackageName: "api",
			Generate: codegen.GenerateOptions{EchoServer: true, Strict: true, Models: true}}); err != nil {
			return fmt.Errorf("oapi-codegen alone: %w", err)
		}
		oapiTimes = append(oapiTimes, time.Since(start))

		data, doc, n, err := load(path, overlay)
		if err != nil {
			return err
		}
		added = n
		start = time.Now()
		d, err := spec.Validate(path, data, doc)
		if err != nil {
			return err
		}
		if res, err = gen.FromDocument(cfg, data, d); err != nil {
			return err
		}
		idemTimes = append(idemTimes, time.Since(start))
		idempotent, ops = len(d.Idempotent()), len(d.Operations)
	}
	fmt.Printf("spec %s: %d operations, %d idempotent (%d added by the overlay)\n", path, ops, idempotent, added)
	o, g := median(oapiTimes), median(idemTimes)
	fmt.Printf("generation, median of %d: oapi-codegen alone %v, idemgen %v (oapi-codegen included): %.2fx\n",
		runs, o.Round(time.Millisecond), g.Round(time.Millisecond), float64(g)/float64(o))
	if err := tempmod.New(dir, "example.test/realspec"); err != nil {
		return err
	}
	if err := gen.Write(res, cfg.Output, os.Stderr); err != nil {
		return err
	}
	start := time.Now()
	if out, err := tempmod.Go(dir, "vet", "./..."); err != nil {
		return fmt.Errorf("the generated module does not compile:\n%s%w", out, err)
	}
	fmt.Printf("compiled and vetted the generated module in %v\n", time.Since(start).Round(time.Millisecond))
	return nil
}

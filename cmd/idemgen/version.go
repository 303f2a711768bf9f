package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/idemgen/idemgen/gen"
)

func init() {
	register("version", "print idemgen's version, VCS revision, Go version and the oapi-codegen it links", runVersion)
}

func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, "usage: idemgen version") }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return errUsage
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return errors.New("this binary carries no build information (it was built without module support)")
	}
	writeVersion(stdout, bi)
	return nil
}

// writeVersion prints one "name value" line per fact of the build, in a
// fixed order, so a bug report can quote it and a script can grep it.
func writeVersion(w io.Writer, bi *debug.BuildInfo) {
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	line := func(name, value string) { fmt.Fprintf(w, "%-13s%s\n", name, value) }

	line("idemgen", module(&bi.Main))
	if rev := settings["vcs.revision"]; rev != "" {
		if settings["vcs.modified"] == "true" {
			rev += " (modified)"
		}
		line("revision", rev)
		if t := settings["vcs.time"]; t != "" {
			line("committed", t)
		}
	} else {
		line("revision", "unknown (no VCS information in the build; see -buildvcs in 'go help build')")
	}
	line("go", bi.GoVersion+" "+runtime.GOOS+"/"+runtime.GOARCH)
	oapi := "not linked"
	if d := gen.OapiCodegenDep(bi); d != nil {
		oapi = module(d)
	}
	line("oapi-codegen", oapi)
}

// module formats a module's path and version, and its replacement if any:
// a replaced module's code is the replacement's, whatever its version says.
func module(m *debug.Module) string {
	s := m.Path + " " + m.Version
	if r := m.Replace; r != nil {
		s += " => " + strings.TrimSpace(r.Path+" "+r.Version)
	}
	return s
}

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/tools/go/analysis/unitchecker"

	"github.com/idemgen/idemgen/idemvet"
)

func init() {
	register("vet", "check phase implementations against the phase contract (go vet with idemvet)", runVet)
}

// runVet runs go vet with this executable as its vet tool, so the check
// needs no second binary: go vet then calls idemgen back once per package
// (see isVetTool), caches the results, and loads each package's
// dependencies for their facts as it does for its own analyzers.
func runVet(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("vet", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: idemgen vet [packages]")
		fmt.Fprintln(stderr, "Checks the phase implementations of the packages (default ./...), and their")
		fmt.Fprintln(stderr, "handlers of GET, HEAD and OPTIONS operations, which must change nothing, with go vet;")
		fmt.Fprintln(stderr, "docs/testing.md and go doc github.com/idemgen/idemgen/idemvet give the rules.")
		fmt.Fprintln(stderr, "Silence one finding with //idemgen:ignore <reason> on its line or the line above.")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	pkgs := fs.Args()
	if len(pkgs) == 0 {
		pkgs = []string{"./..."}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this executable for go vet -vettool: %w", err)
	}
	cmd := exec.Command("go", append([]string{"vet", "-vettool=" + self}, pkgs...)...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) && exit.ExitCode() > 0 {
		return exitCode(exit.ExitCode())
	}
	return err
}

// exitCode is the status of a command whose output idemgen passed through:
// idemgen exits with it and adds nothing, the output said why.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// isVetTool reports whether go vet invoked this executable as its
// -vettool: it asks for the tool's version (-V=full) and flags (-flags),
// then passes flags and one unit's config file, *.cfg. None of these is a
// command name, so an idemgen command is never taken for them.
func isVetTool(args []string) bool {
	if len(args) == 0 {
		return false
	}
	if _, ok := commands[args[0]]; ok {
		return false
	}
	return args[0] == "-V=full" || args[0] == "-flags" || strings.HasSuffix(args[len(args)-1], ".cfg")
}

// vetTool runs the idemvet analyzer for go vet; it does not return.
func vetTool() { unitchecker.Main(idemvet.Analyzer) }

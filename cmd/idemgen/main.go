// Command idemgen generates idempotent echo services from OpenAPI specs and
// operates their idempotency store.
//
//	idemgen init      write a starter idemgen.yaml and generate.go
//	idemgen generate  generate code from a spec (see docs/getting-started.md)
//	idemgen check     lint a spec's x-idempotency extensions
//	idemgen migrate   apply, revert or print the store's schema migrations
//	idemgen prune     delete records past their retention
//	idemgen inspect   show one key's record
//	idemgen abandoned list claims whose owner died
//	idemgen resolve   settle one abandoned claim deliberately
//	idemgen version   print the version, VCS revision, Go and oapi-codegen versions
//	idemgen vet       check phase implementations against the phase contract (go vet)
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
)

type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func register(name, summary string, run func(args []string, stdout, stderr io.Writer) error) {
	commands[name] = command{summary, run}
}

// errUsage reports bad arguments; the message has already been printed.
var errUsage = errors.New("usage")

func main() {
	if isVetTool(os.Args[1:]) {
		vetTool() // go vet calls idemgen back for `idemgen vet`
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "idemgen: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	if err := cmd.run(args[1:], stdout, stderr); err != nil {
		if code, ok := err.(exitCode); ok {
			return int(code)
		}
		if errors.Is(err, errUsage) || errors.Is(err, flag.ErrHelp) {
			return 2
		}
		fmt.Fprintf(stderr, "idemgen %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: idemgen <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'idemgen <command> -h' for a command's flags.")
}

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("idemgen "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

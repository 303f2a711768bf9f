// Command idemgen-vet checks the phase implementations of an idemgen
// service against the phase contract (see package idemvet for the rules).
// It is a go vet tool:
//
//	go install github.com/idemgen/idemgen/cmd/idemgen-vet
//	go vet -vettool=$(which idemgen-vet) ./...
//
// `idemgen vet ./...` runs the same check without a separate binary.
package main

import (
	"golang.org/x/tools/go/analysis/unitchecker"

	"github.com/idemgen/idemgen/idemvet"
)

func main() { unitchecker.Main(idemvet.Analyzer) }

package idemtype_test

import (
	"fmt"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// A scope is parsed once, from the extension's string; the runtime takes
// the parsed form.
func ExampleParseScope() {
	sc, err := idemtype.ParseScope("header:X-Tenant")
	fmt.Println(sc.Kind, sc.Name, sc, err)
	_, err = idemtype.ParseScope("tenant")
	fmt.Println(err)
	// Output:
	// header X-Tenant header:X-Tenant <nil>
	// "tenant" is not a scope; use principal, global, header:<Header-Name>, path:<param> or sender:<name> (principal+header:<Header-Name> or principal+path:<param> for both)
}

// Every protocol error kind has a status, a title and a problem type.
func ExampleErrorKind() {
	k := idemtype.KindInFlight
	fmt.Println(k.Status(), k.ProblemType())
	fmt.Println(k.Title())
	// Output:
	// 409 urn:idemgen:problem:in-flight
	// A request with this Idempotency-Key is in progress
}

func ExampleParsePointer() {
	toks, err := idemtype.ParsePointer("/data/a~1b/m~0n")
	fmt.Printf("%q %v\n", toks, err)
	// Output: ["data" "a/b" "m~n"] <nil>
}

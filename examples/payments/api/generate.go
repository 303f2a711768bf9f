// Package api is the payments service's HTTP API: the code idemgen generated
// from ../api.yaml (*.gen.go), and the phases and handlers written by hand.
package api

//go:generate go tool idemgen generate -config idemgen.yaml ../api.yaml

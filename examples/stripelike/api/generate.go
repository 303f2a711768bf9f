// Package api is a Stripe-compatible API's customers and charges: the code
// idemgen generated from ../api.yaml (*.gen.go) with the stripe preset,
// and the phases and service written by hand.
package api

//go:generate go tool idemgen generate -config idemgen.yaml ../api.yaml

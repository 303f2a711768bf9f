// Package sdk is a provider's SDK in stripe-go's style: a resource's client
// calls its backend, an interface, so no fact says it reaches the network.
package sdk

type Params struct {
	IdempotencyKey *string
	Amount         *int64
}

func String(s string) *string { return &s }

func Int64(v int64) *int64 { return &v }

// Backend is what the SDK sends requests through (an HTTP client in
// production, a fake in tests).
type Backend interface {
	Call(method, path string, params *Params, out any) error
}

type Charge struct{ ID string }

type Client struct{ B Backend }

func (c Client) New(params *Params) (*Charge, error) {
	ch := &Charge{}
	err := c.B.Call("POST", "/v1/charges", params, ch)
	return ch, err
}

package cardnet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// ErrDeclined is returned by Client.Charge when the network declines.
var ErrDeclined = errors.New("cardnet: card declined")

// Client calls a card network over HTTP.
type Client struct {
	URL  string
	HTTP *http.Client
}

// Charge asks the network to charge req under the idempotency key. It
// returns the charge, ErrDeclined, or an error whose outcome is unknown
// (the charge may or may not have happened).
func (c *Client) Charge(ctx context.Context, key string, req Request) (Charge, error) {
	body, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+"/charges", bytes.NewReader(body))
	if err != nil {
		return Charge{}, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Idempotency-Key", key)
	client := c.HTTP
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	res, err := client.Do(hr)
	if err != nil {
		return Charge{}, fmt.Errorf("cardnet: %w", err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return Charge{}, fmt.Errorf("cardnet: reading the answer: %w", err)
	}
	var ch Charge
	switch res.StatusCode {
	case http.StatusCreated:
		if err := json.Unmarshal(data, &ch); err != nil {
			return Charge{}, fmt.Errorf("cardnet: %w", err)
		}
		return ch, nil
	case http.StatusPaymentRequired:
		return Charge{}, ErrDeclined
	}
	return Charge{}, fmt.Errorf("cardnet: %s: %s", res.Status, bytes.TrimSpace(data))
}

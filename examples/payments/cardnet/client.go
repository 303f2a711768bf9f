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
	res, err := c.httpClient().Do(hr)
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

// Charges lists the network's successful charges (GET /charges): what
// anyone counting charges per payment or per customer reads.
func (c *Client) Charges(ctx context.Context) ([]Charge, error) {
	var list struct {
		Charges []Charge `json:"charges"`
	}
	return list.Charges, c.get(ctx, "/charges", &list)
}

// Events lists every webhook event the network made and how each delivery
// went (GET /events).
func (c *Client) Events(ctx context.Context) ([]EventStatus, error) {
	var list struct {
		Events []EventStatus `json:"events"`
	}
	return list.Events, c.get(ctx, "/events", &list)
}

// get decodes the JSON answer of GET path into v.
func (c *Client) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+path, nil)
	if err != nil {
		return err
	}
	res, err := c.httpClient().Do(req)
	if err != nil {
		return fmt.Errorf("cardnet: GET %s: %w", path, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("cardnet: GET %s: %s", path, res.Status)
	}
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		return fmt.Errorf("cardnet: GET %s: %w", path, err)
	}
	return nil
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Timeout: 30 * time.Second}
}

package api

// This file is yours. idemgen wrote it because it was missing and will never
// overwrite it. If the spec changes PostCustomers's phases, the assertion
// below stops compiling until these methods match PostCustomersPhases again.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostCustomersState is what the phases of PostCustomers hand to each other.
type PostCustomersState struct{}

// PostCustomersImpl implements PostCustomersPhases.
type PostCustomersImpl struct{}

var _ PostCustomersPhases = (*PostCustomersImpl)(nil)

// Execute creates the customer.
func (p *PostCustomersImpl) Execute(ctx context.Context, tx pgx.Tx, request PostCustomersRequestObject, state *PostCustomersState) (PostCustomersResponseObject, error) {
	c := PostCustomers200JSONResponse{Id: newID("cus_"), Object: CustomerObjectCustomer, Created: time.Now().Unix()}
	if request.Body != nil {
		c.Email = request.Body.Email
	}
	_, err := tx.Exec(ctx, `INSERT INTO customers (id, email, created) VALUES ($1, $2, $3)`, c.Id, c.Email, c.Created)
	return c, err
}

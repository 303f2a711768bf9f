package api

// This file is yours. idemgen wrote it because it was missing and will never
// overwrite it. If the spec changes createJob's phases, the assertion
// below stops compiling until these methods match CreateJobPhases again.

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// CreateJobState is what the phases of createJob hand to each other. It is
// saved as JSON with every local phase's commit, and a resumed execution
// starts from the saved copy: keep its fields exported and JSON-encodable.
type CreateJobState struct {
}

// CreateJobImpl implements CreateJobPhases. Put its dependencies here.
type CreateJobImpl struct {
}

var _ CreateJobPhases = (*CreateJobImpl)(nil)

// Execute is phase 1 of 1 ("execute"), final: it runs in tx, which also stores the response it
// returns; that response is replayed byte for byte to every retry.
func (p *CreateJobImpl) Execute(ctx context.Context, tx pgx.Tx, request CreateJobRequestObject, state *CreateJobState) (CreateJobResponseObject, error) {
	return nil, idem.ErrNotImplemented
}

package api

// This file is yours. idemgen wrote it because it was missing and will never
// overwrite it. If the spec changes PostSources's phases, the assertion
// below stops compiling until these methods match PostSourcesPhases again.

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// PostSourcesState is what the phases of PostSources hand to each other. It is
// saved as JSON with every local phase's commit, and a resumed execution
// starts from the saved copy: keep its fields exported and JSON-encodable.
type PostSourcesState struct {
}

// PostSourcesImpl implements PostSourcesPhases. Put its dependencies here.
type PostSourcesImpl struct {
}

var _ PostSourcesPhases = (*PostSourcesImpl)(nil)

// Execute is phase 1 of 1 ("execute"), final: it runs in tx, which also stores the response it
// returns; that response is replayed byte for byte to every retry.
func (p *PostSourcesImpl) Execute(ctx context.Context, tx pgx.Tx, request PostSourcesRequestObject, state *PostSourcesState) (PostSourcesResponseObject, error) {
	return nil, idem.ErrNotImplemented
}

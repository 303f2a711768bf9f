package api

// This file is yours. idemgen wrote it because it was missing and will never
// overwrite it. If the spec changes createImport's phases, the assertion
// below stops compiling until these methods match CreateImportPhases again.
//
// Prove the phases once they are written (docs/testing.md):
//
//	idemtest.Check(t, idemtest.Case[CreateImportState]{
//		Operation: CreateImportOperation(),
//		Phases: func() []idem.Phase[CreateImportState] {
//			return CreateImportPhaseList(&CreateImportImpl{}, request)
//		},
//	})
//
// runs them through a crash at every recovery point, a takeover and
// concurrent duplicates, and `go tool idemgen vet ./...` reads them for the
// rules a phase must keep (a local phase writes only through tx, a foreign
// phase sends key and what state holds).

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// CreateImportState is what the phases of createImport hand to each other. It is
// saved as JSON with every local phase's commit, and a resumed execution
// starts from the saved copy: keep its fields exported and JSON-encodable.
type CreateImportState struct {
}

// CreateImportImpl implements CreateImportPhases. Put its dependencies here.
type CreateImportImpl struct {
}

var _ CreateImportPhases = (*CreateImportImpl)(nil)

// Execute is phase 1 of 1 ("execute"), final: it runs in tx, which also stores the response it
// returns; that response is replayed byte for byte to every retry.
func (p *CreateImportImpl) Execute(ctx context.Context, tx pgx.Tx, request CreateImportRequestObject, state *CreateImportState) (CreateImportResponseObject, error) {
	return nil, idem.ErrNotImplemented
}

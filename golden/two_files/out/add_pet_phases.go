package api

// This file is yours. idemgen wrote it because it was missing and will never
// overwrite it. If the spec changes addPet's phases, the assertion
// below stops compiling until these methods match AddPetPhases again.
//
// Prove the phases once they are written (docs/testing.md):
//
//	idemtest.Check(t, idemtest.Case[AddPetState]{
//		Operation: AddPetOperation(),
//		Phases: func() []idem.Phase[AddPetState] {
//			return AddPetPhaseList(&AddPetImpl{}, request)
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

// AddPetState is what the phases of addPet hand to each other. It is
// saved as JSON with every local phase's commit, and a resumed execution
// starts from the saved copy: keep its fields exported and JSON-encodable.
type AddPetState struct {
}

// AddPetImpl implements AddPetPhases. Put its dependencies here.
type AddPetImpl struct {
}

var _ AddPetPhases = (*AddPetImpl)(nil)

// InsertPet is phase 1 of 1 ("insert_pet"), final: it runs in tx, which also stores the response it
// returns; that response is replayed byte for byte to every retry.
func (p *AddPetImpl) InsertPet(ctx context.Context, tx pgx.Tx, request AddPetRequestObject, state *AddPetState) (AddPetResponseObject, error) {
	return nil, idem.ErrNotImplemented
}

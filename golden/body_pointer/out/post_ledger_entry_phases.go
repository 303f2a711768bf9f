package api

// This file is yours. idemgen wrote it because it was missing and will never
// overwrite it. If the spec changes postLedgerEntry's phases, the assertion
// below stops compiling until these methods match PostLedgerEntryPhases again.
//
// Prove the phases once they are written (docs/testing.md):
//
//	idemtest.Check(t, idemtest.Case[PostLedgerEntryState]{
//		Operation: PostLedgerEntryOperation(),
//		Phases: func() []idem.Phase[PostLedgerEntryState] {
//			return PostLedgerEntryPhaseList(&PostLedgerEntryImpl{}, request)
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

// PostLedgerEntryState is what the phases of postLedgerEntry hand to each other. It is
// saved as JSON with every local phase's commit, and a resumed execution
// starts from the saved copy: keep its fields exported and JSON-encodable.
type PostLedgerEntryState struct {
}

// PostLedgerEntryImpl implements PostLedgerEntryPhases. Put its dependencies here.
type PostLedgerEntryImpl struct {
}

var _ PostLedgerEntryPhases = (*PostLedgerEntryImpl)(nil)

// PostEntry is phase 1 of 1 ("post_entry"), final: it runs in tx, which also stores the response it
// returns; that response is replayed byte for byte to every retry.
func (p *PostLedgerEntryImpl) PostEntry(ctx context.Context, tx pgx.Tx, request PostLedgerEntryRequestObject, state *PostLedgerEntryState) (PostLedgerEntryResponseObject, error) {
	return nil, idem.ErrNotImplemented
}

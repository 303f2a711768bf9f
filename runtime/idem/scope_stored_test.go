package idem_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestScopeIsNotStored: a scope that is a credential (a secret key as the
// principal) is kept in the records table only as its digest, by a claim
// in progress as by a completed record, and the background completer,
// which has only what the table keeps, still resumes the execution with
// the foreign key its owner used: one charge. Every claim mode.
func TestScopeIsNotStored(t *testing.T) {
	t.Parallel()
	const secret = "sk_live_51HxSTOREDnotInTheTable"
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		cd, runs := &card{charges: map[string]string{}}, 0
		op := &idem.Operation{ID: "bg-secret", Policy: idem.Policy{Lease: 30 * time.Second, Complete: idemtype.CompleteBackground}}
		idem.RegisterCompleter(e.eng, op, func(payload []byte) ([]idem.Phase[payState], error) {
			return threePhases(string(payload), cd, &runs, ""), nil
		})
		// The owner dies after the charge (its goroutine ends there): a
		// claim in progress.
		done := make(chan struct{})
		go func() {
			defer close(done)
			idem.Run(ctx, e.eng, op, request(secret, "charge-key-0001", "k"), threePhases("k", cd, &runs, "after-charge"))
		}()
		<-done
		table := func() string {
			var text string
			if err := e.pool.QueryRow(ctx, `SELECT coalesce(string_agg(r::text, ' '), '') FROM records AS r`).Scan(&text); err != nil {
				t.Fatal(err)
			}
			return text
		}
		if text := table(); text == "" || strings.Contains(text, secret) || strings.Contains(text, "STORED") {
			t.Fatalf("the records table holds the credential (or nothing): %s", text)
		}
		if !strings.Contains(table(), idemadmin.ScopeDigest(secret)) {
			t.Errorf("the claim does not hold the scope's digest %s", idemadmin.ScopeDigest(secret))
		}
		e.expireLeases()
		if n, err := idemadmin.CompleteAbandoned(ctx, e.eng, 10); n != 1 || err != nil {
			t.Fatalf("CompleteAbandoned = %d, %v; want 1", n, err)
		}
		if len(cd.charges) != 1 || len(cd.keys) != 2 || cd.keys[0] != cd.keys[1] {
			t.Fatalf("charge keys %v; want the dead owner's key again: one charge", cd.keys)
		}
		fp := request(secret, "charge-key-0001", "k").Fingerprint
		if want := idemadmin.DeriveKey(idemadmin.CurrentKeyDerivation, op.ID, secret, "charge-key-0001", "charge", fp, 64); cd.keys[0] != want {
			t.Errorf("the charge key %s; want DeriveKey's %s", cd.keys[0], want)
		}
		if text := table(); strings.Contains(text, secret) {
			t.Fatalf("the completed record holds the credential: %s", text)
		}
		out, err := idem.Run(ctx, e.eng, op, request(secret, "charge-key-0001", "k"), threePhases("k", cd, &runs, ""))
		if err != nil || !out.Replayed {
			t.Fatalf("the retry: %+v, %v; want the replay", out, err)
		}
	})
}

// TestNewerDerivationIsLeftForAnOperator: a record claimed by a newer
// engine, whose derived keys this one cannot make, is not resumed (a
// foreign call would go out under another key): 500, the record kept.
func TestNewerDerivationIsLeftForAnOperator(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		cd, runs := &card{charges: map[string]string{}}, 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			idem.Run(ctx, e.eng, payOp, request("t", "future-key-0001", "b"), threePhases("future-key-0001", cd, &runs, "before-charge"))
		}()
		<-done
		e.exec(`UPDATE ` + e.schema + `.records SET key_derivation = 99`)
		e.expireLeases()
		_, err := idem.Run(ctx, e.eng, payOp, request("t", "future-key-0001", "b"), threePhases("future-key-0001", cd, &runs, ""))
		if kindOf(err) != idemtype.KindFailed || cd.calls != 0 {
			t.Fatalf("resuming a record of derivation 99: %v, %d card calls; want failed and none", err, cd.calls)
		}
		if n := e.count(`SELECT count(*) FROM records WHERE owner_token IS NOT NULL`); n != 1 {
			t.Errorf("%d claimed records; want the record kept for an operator", n)
		}
	}, notIn{idem.ClaimLast, "its phases include a foreign one, which last mode does not run"})
}

// TestResolveByID: an operator lists an abandoned record whose scope (a
// credential) the table keeps only as its digest, and settles it by the id
// the list shows, without the scope.
func TestResolveByID(t *testing.T) {
	t.Parallel()
	const secret = "sk_live_51HxOPERATORnever"
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		cd, runs := &card{charges: map[string]string{}}, 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			idem.Run(ctx, e.eng, payOp, request(secret, "stuck-key-0001", "b"), threePhases("stuck-key-0001", cd, &runs, "after-charge"))
		}()
		<-done
		e.expireLeases()
		rs, err := idemadmin.Abandoned(ctx, e.eng, idemadmin.AbandonedQuery{StuckOnly: false, Limit: 10})
		if err != nil || len(rs) != 1 {
			t.Fatalf("Abandoned: %v, %v; want one record", rs, err)
		}
		if rs[0].Scope != idemadmin.ScopeDigest(secret) || rs[0].ID == "" {
			t.Fatalf("the listing: scope %q, id %q; want the scope's digest and an id", rs[0].Scope, rs[0].ID)
		}
		if err := idemadmin.ResolveID(ctx, e.eng, rs[0].ID, idemadmin.Resolution{Delete: true}); err != nil {
			t.Fatalf("ResolveID: %v", err)
		}
		if n := e.count(`SELECT count(*) FROM records`); n != 0 {
			t.Errorf("%d records after the delete; want none", n)
		}
		if err := idemadmin.ResolveID(ctx, e.eng, "not-an-id", idemadmin.Resolution{Delete: true}); err == nil {
			t.Error("a malformed id was accepted")
		}
	}, notIn{idem.ClaimLast, "its phases include a foreign one, which last mode does not run"})
}

// TestPublicScopeIsKept: a scope that names no secret (a webhook's sender,
// KeyedRequest.ScopePublic) is kept as it is, with key derivation 2, so
// that the background completer's phases see it (Execution.Scope) and
// derive the owner's foreign key.
func TestPublicScopeIsKept(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		cd, runs := &card{charges: map[string]string{}}, 0
		var seen []string
		withScope := func(ps []idem.Phase[payState]) []idem.Phase[payState] {
			final := ps[2].Final
			ps[2].Final = func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
				seen = append(seen, idem.ExecutionFrom(ctx).Scope)
				return final(ctx, tx, s)
			}
			return ps
		}
		op := &idem.Operation{ID: "bg-public", Policy: idem.Policy{Lease: 30 * time.Second, Complete: idemtype.CompleteBackground}}
		idem.RegisterCompleter(e.eng, op, func(payload []byte) ([]idem.Phase[payState], error) {
			return withScope(threePhases(string(payload), cd, &runs, "")), nil
		})
		req := request("cardnet", "evt-public-0001", "k")
		req.ScopePublic = true
		done := make(chan struct{})
		go func() {
			defer close(done)
			idem.Run(ctx, e.eng, op, req, threePhases("k", cd, &runs, "after-charge"))
		}()
		<-done
		if n := e.count(`SELECT count(*) FROM records WHERE scope = 'cardnet' AND key_derivation = 2`); n != 1 {
			t.Fatalf("%d records keep the public scope with derivation 2; want 1", n)
		}
		e.expireLeases()
		if n, err := idemadmin.CompleteAbandoned(ctx, e.eng, 10); n != 1 || err != nil {
			t.Fatalf("CompleteAbandoned = %d, %v; want 1", n, err)
		}
		if len(cd.charges) != 1 || len(seen) != 1 || seen[0] != "cardnet" {
			t.Fatalf("charges %v, the completer's phase saw scope %v; want one charge and cardnet", cd.keys, seen)
		}
	})
}

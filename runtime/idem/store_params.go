package idem

import (
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// statements is every statement of sql/*.sql, a field each, named as its
// block and typed by its parameters. loadStatements fills it in.
type statements struct {
	// claim.sql
	Claim, ClaimAsync stmt[claimParams]
	Read              stmt[idParams]
	ClaimRead         stmt[claimReadParams]
	Takeover          stmt[takeoverParams]
	DeleteExpired     stmt[idParams]
	Watch             stmt[idsParams]
	// execution.sql
	Advance         stmt[advanceParams]
	Complete        stmt[completeParams]
	InsertCompleted stmt[insertCompletedParams]
	// the same, for a request with a natural key (migration 008)
	CompleteNatural        stmt[completeParams]
	InsertCompletedNatural stmt[insertCompletedParams]
	CommitAsync            stmt[noParams]
	Release                stmt[releaseParams]
	Yield                  stmt[ownerParams]
	Refresh                stmt[refreshParams]
	// prune.sql
	PruneBounds   stmt[pruneBoundsParams]
	Prune         stmt[pruneParams]
	PruneSkipping stmt[pruneSkippingParams]
	PruneRest     stmt[pruneRestParams]
	CountStuck    stmt[noParams]
	// operator.sql
	Inspect             stmt[idParams]
	Abandoned           stmt[abandonedParams]
	NamespacesOf        stmt[operationParams]
	AbandonedBackground stmt[abandonedBackgroundParams]
	ResolveDelete       stmt[idParams]
	ResolveRead         stmt[idParams]
	ResolveComplete     stmt[resolveCompleteParams]
	Reconcile           stmt[reconcileParams]
}

// The parameters of the statements. Ids and owner tokens are pgtype.UUID,
// whose type pgx knows without asking the server, as QueryExecModeExec and
// the simple protocol do not; durations are microseconds (bigint), which
// PostgreSQL turns into an interval exactly (micros).

type noParams struct{}

type idParams struct {
	ID        pgtype.UUID `db:"id"`
	Placement string      `db:"placement"` // the record\'s placement, where it has one (layoutPlacement)
}

type idsParams struct {
	IDs []pgtype.UUID `db:"ids"`
}

type ownerParams struct {
	ID         pgtype.UUID `db:"id"`
	Placement  string      `db:"placement"` // the record\'s placement, where it has one (layoutPlacement)
	OwnerToken pgtype.UUID `db:"owner_token"`
}

type claimParams struct {
	ID            pgtype.UUID `db:"id"`
	Placement     string      `db:"placement"` // the record\'s placement, where it has one (layoutPlacement)
	Namespace     string      `db:"namespace"`
	Scope         string      `db:"scope"`
	Key           string      `db:"key"`
	OwnerToken    pgtype.UUID `db:"owner_token"`
	Operation     string      `db:"operation"`
	Fingerprint   []byte      `db:"fingerprint"`
	LeaseUS       int64       `db:"lease_us"`
	Request       []byte      `db:"request"`
	Background    bool        `db:"background"`
	RetentionUS   int64       `db:"retention_us"`
	KeyDerivation int16       `db:"key_derivation"`
	// DerivedKeyLength is the claim's derived key length, kept with the
	// record so that a resumed foreign call presents the same key.
	DerivedKeyLength int16  `db:"derived_key_length"`
	LockTimeout      string `db:"lock_timeout"` // the claim wait, in milliseconds
}

type claimReadParams struct {
	ID               pgtype.UUID `db:"id"`
	Placement        string      `db:"placement"`         // the record\'s placement, where it has one (layoutPlacement)
	StatementTimeout string      `db:"statement_timeout"` // the lease, in milliseconds
}

type takeoverParams struct {
	ID          pgtype.UUID `db:"id"`
	Placement   string      `db:"placement"`   // the record\'s placement, where it has one (layoutPlacement)
	OwnerToken  pgtype.UUID `db:"owner_token"` // the owner observed
	NewOwner    pgtype.UUID `db:"new_owner"`
	LeaseUS     int64       `db:"lease_us"`
	RetentionUS int64       `db:"retention_us"`
}

type advanceParams struct {
	ID            pgtype.UUID `db:"id"`
	Placement     string      `db:"placement"` // the record\'s placement, where it has one (layoutPlacement)
	OwnerToken    pgtype.UUID `db:"owner_token"`
	RecoveryPoint string      `db:"recovery_point"`
	// The state as json.RawMessage, which pgx knows as json in every exec
	// mode (a []byte would go as bytea where pgx does not ask).
	PhaseState  json.RawMessage `db:"phase_state"`
	LeaseUS     int64           `db:"lease_us"`
	RetentionUS int64           `db:"retention_us"`
}

type completeParams struct {
	ID          pgtype.UUID `db:"id"`
	NaturalKey  []byte      `db:"natural_key"` // the request's (KeyedRequest.NaturalKey), in the Natural statement
	Placement   string      `db:"placement"`   // the record\'s placement, where it has one (layoutPlacement)
	OwnerToken  pgtype.UUID `db:"owner_token"`
	Fingerprint []byte      `db:"fingerprint"`
	Status      int         `db:"status"`
	Headers     []byte      `db:"headers"`
	Body        []byte      `db:"body"`
	BodyOmitted bool        `db:"body_omitted"`
	RetentionUS int64       `db:"retention_us"`
}

type insertCompletedParams struct {
	ID          pgtype.UUID `db:"id"`
	NaturalKey  []byte      `db:"natural_key"` // the request's (KeyedRequest.NaturalKey), in the Natural statement
	Placement   string      `db:"placement"`   // the record\'s placement, where it has one (layoutPlacement)
	Fingerprint []byte      `db:"fingerprint"`
	Status      int         `db:"status"`
	Headers     []byte      `db:"headers"`
	Body        []byte      `db:"body"`
	BodyOmitted bool        `db:"body_omitted"`
	RetentionUS int64       `db:"retention_us"`
	LockTimeout string      `db:"lock_timeout"` // milliseconds
}

type releaseParams struct {
	ID            pgtype.UUID `db:"id"`
	Placement     string      `db:"placement"` // the record\'s placement, where it has one (layoutPlacement)
	OwnerToken    pgtype.UUID `db:"owner_token"`
	RecoveryPoint string      `db:"recovery_point"`
}

type refreshParams struct {
	ID         pgtype.UUID `db:"id"`
	Placement  string      `db:"placement"` // the record\'s placement, where it has one (layoutPlacement)
	OwnerToken pgtype.UUID `db:"owner_token"`
	LeaseUS    int64       `db:"lease_us"`
}

type pruneBoundsParams struct {
	From    time.Time `db:"from"`
	Batch   int       `db:"batch"`
	Batches int       `db:"batches"`
}

type pruneParams struct {
	From        time.Time `db:"from"`
	To          time.Time `db:"to"`
	LockTimeout string    `db:"lock_timeout"`
}

type pruneSkippingParams struct {
	From  time.Time `db:"from"`
	Batch int       `db:"batch"`
}

type pruneRestParams struct {
	Seconds float64 `db:"seconds"`
}

type operationParams struct {
	Operation string `db:"operation"`
}

type abandonedParams struct {
	StuckOnly bool   `db:"stuck_only"`
	Namespace string `db:"namespace"`
	Operation string `db:"operation"`
	Limit     int    `db:"limit"`
}

type abandonedBackgroundParams struct {
	Operations  []string `db:"operations"`
	MaxAttempts int      `db:"max_attempts"`
	Limit       int      `db:"limit"`
}

type resolveCompleteParams struct {
	ID                 pgtype.UUID `db:"id"`
	Placement          string      `db:"placement"`
	OwnerToken         pgtype.UUID `db:"owner_token"`
	Fingerprint        []byte      `db:"fingerprint"`
	Status             int         `db:"status"`
	Headers            []byte      `db:"headers"`
	Body               []byte      `db:"body"`
	RetentionUS        int64       `db:"retention_us"`
	DefaultRetentionUS int64       `db:"default_retention_us"`
}

type reconcileParams struct {
	Since time.Time `db:"since"`
	Limit int       `db:"limit"`
}

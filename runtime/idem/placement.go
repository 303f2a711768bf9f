package idem

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Records placed by a value of the request (Policy's operation declares
// it: a tenant's or an account's id, idemtype.Placement) live where the
// service's own rows of that value live: on Citus, the records table is
// distributed by its placement column and co-located with a table of the
// service's (idemmigrate's DistributeOptions), and every statement of a
// request names the placement with the id, so that Citus routes it, and
// the phases' writes with it, to one worker. docs/scaling.md, "Placement
// by tenant", says when to choose it.
//
// The statements are sql/*.sql's (and sql/citus/*.sql's on Citus),
// rewritten when the records table has a placement column (store.detect):
// placedClauses lists, for each statement of a request, what gains the
// placement. A request of an operation that declares none is placed by
// its record's id (placementOf), so that such records spread as they do
// by id.

// placedRewrites are the rewrites of a statement's text that name the
// placement beside the id. The first are the inserts', the only ones a
// store that is recording (a move under way) makes.
var placedRewrites = []struct{ old, new string }{
	{"INSERT INTO {{schema}}.records (id, ", "INSERT INTO {{schema}}.records (placement, id, "},
	// INSERT ... SELECT gives an untyped parameter the type text: the
	// column's type is said. VALUES takes it from the column, which Citus'
	// router needs (a cast of the distribution column's parameter is not
	// routed).
	{"SELECT @id, ", "SELECT CAST(@placement AS {{placement_type}}), @id, "},
	{"VALUES (@id, ", "VALUES (@placement, @id, "},
	{"WHERE id = @id", "WHERE placement = @placement AND id = @id"},
	{"WHERE r.id = @id", "WHERE r.placement = @placement AND r.id = @id"},
	{"ON r.id = @id", "ON r.placement = @placement AND r.id = @id"},
	{"SELECT id, namespace, scope, key, operation, owner_token, request, fingerprint\n", "SELECT id, namespace, scope, key, operation, owner_token, request, fingerprint, placement::text\n"},
}

// insertRewrites is how many of placedRewrites' first rewrite inserts.
const insertRewrites = 3

// recordingRewrites are a recording store's: its inserts write the
// placement, and its completer reads it where a record has one (a record
// made before the move has none).
var recordingRewrites = append(placedRewrites[:insertRewrites:insertRewrites], struct{ old, new string }{
	"SELECT id, namespace, scope, key, operation, owner_token, request, fingerprint\n",
	"SELECT id, namespace, scope, key, operation, owner_token, request, fingerprint, coalesce(placement::text, '')\n",
})

// placedStatements are the statements a placement changes: every
// statement of a request on its record, the completer's list of abandoned
// records, which says where each is, and an operator's resolution, which
// writes one record (at the placement its id has: store.placementByID).
// The operator's reads and the pruner's find records by id or by age,
// across placements. recordingStatements are those a recording store
// changes: what inserts a record, and the completer's list.
var (
	placedStatements = map[string]bool{
		"Claim": true, "ClaimAsync": true, "Read": true, "ClaimRead": true, "Takeover": true, "DeleteExpired": true,
		"Advance": true, "Complete": true, "InsertCompleted": true, "Release": true, "Yield": true, "Refresh": true,
		"AbandonedBackground": true, "ResolveDelete": true, "ResolveRead": true, "ResolveComplete": true,
	}
	recordingStatements = map[string]bool{"Claim": true, "ClaimAsync": true, "InsertCompleted": true, "AbandonedBackground": true}
)

// placed is statement name's src as the placement layout sends it, the
// placement column of type typ (recording: as a store recording the
// placement sends it); an error when a statement that must name the
// placement would not.
func placed(name, src, typ string, recording bool) (string, error) {
	statements, rewrites := placedStatements, placedRewrites
	if recording {
		statements, rewrites = recordingStatements, recordingRewrites
	}
	if !statements[name] {
		return src, nil
	}
	out := src
	for _, r := range rewrites {
		out = strings.ReplaceAll(out, r.old, r.new)
	}
	if out == src {
		return "", fmt.Errorf("statement %s names no placement in the placement layout (placement.go's rewrites miss it)", name)
	}
	return strings.ReplaceAll(out, "{{placement_type}}", typ), nil
}

// placementOf is the placement of a request's record: its operation's
// value, or else one made from the record's id in the column's type typ
// (uuid, a bigint, or else text), so that records with no placement
// spread as they do by id.
func placementOf(value string, id [16]byte, typ string) string {
	if value != "" {
		return value
	}
	switch typ {
	case "uuid":
		var b [36]byte
		hex.Encode(b[0:8], id[0:4])
		b[8] = '-'
		hex.Encode(b[9:13], id[4:6])
		b[13] = '-'
		hex.Encode(b[14:18], id[6:8])
		b[18] = '-'
		hex.Encode(b[19:23], id[8:10])
		b[23] = '-'
		hex.Encode(b[24:], id[10:])
		return string(b[:])
	case "bigint", "integer", "smallint":
		v := int64(binary.BigEndian.Uint64(id[:8]))
		switch typ {
		case "integer":
			v = int64(int32(v))
		case "smallint":
			v = int64(int16(v))
		}
		return strconv.FormatInt(v, 10)
	}
	return hex.EncodeToString(id[:])
}

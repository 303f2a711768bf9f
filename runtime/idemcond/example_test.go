package idemcond_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemcond"
)

// A PUT of a resource's shipping address in a net/http handler: the write
// happens only if the row's version is still the one the client read (its
// If-Match), and the answer carries the new ETag. Require answers 428 to a
// request without If-Match, before the handler runs.
func Example() {
	var pool *pgxpool.Pool // the service's
	orders := idemcond.Table{Name: "orders", Key: []string{"account", "id"}}
	put := func(w http.ResponseWriter, r *http.Request) {
		p, err := idemcond.ParseHeader(r.Header)
		var v idemcond.Version
		if err == nil {
			err = pgx.BeginFunc(r.Context(), pool, func(tx pgx.Tx) error {
				v, err = orders.UpdateTx(r.Context(), tx, p, []any{r.Header.Get("Account"), r.PathValue("id")},
					map[string]any{"ship_to": r.FormValue("address")})
				return err
			})
		}
		if e := (*idemcond.Error)(nil); errors.As(err, &e) { // 404, 412, 428, 400
			resp := e.Response()
			w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
			w.WriteHeader(resp.Status)
			w.Write(resp.Body)
			return
		}
		if err != nil {
			http.Error(w, "internal error", 500)
			return
		}
		w.Header().Set("ETag", v.ETag())
		w.WriteHeader(http.StatusNoContent)
	}
	http.Handle("PUT /orders/{id}/shipping", idemcond.Require("If-Match")(http.HandlerFunc(put)))
}

// A client that sends the ETag without its double quotes, or weakened,
// is told what to send.
func ExampleParse() {
	_, err := idemcond.Parse("7", "")
	fmt.Println(err)
	_, err = idemcond.Parse(`W/"7"`, "")
	b, _ := json.MarshalIndent(err.(*idemcond.Error).Problem(), "", "  ")
	fmt.Println(string(b))
	// Output:
	// idemcond: 400 invalid-precondition: If-Match: 7 is not a list of entity tags: send the ETag header's value as it came, double quotes included (If-Match: "7", not If-Match: 7)
	// {
	//   "type": "urn:idemgen:problem:invalid-precondition",
	//   "title": "If-Match or If-None-Match is malformed",
	//   "status": 400,
	//   "detail": "If-Match: W/\"7\" holds a weak entity tag (W/), and If-Match compares ETags strongly (RFC 9110, 13.1.1): send the ETag this API returned, without W/ (a proxy that compresses answers may have weakened it: read the ETag from an answer it did not compress)"
	// }
}

// Check decides on the version read in the transaction that writes: a
// client whose If-Match is an older version gets 412.
func ExamplePreconditions_Check() {
	p, _ := idemcond.Parse(`"3"`, "")
	fmt.Println(p.Check(3, true))
	fmt.Println(p.Check(4, true))
	// Output:
	// <nil>
	// idemcond: 412 precondition-failed: If-Match is "3" and the resource's ETag is now "4": it changed since it was read. GET it again and decide on what it holds now
}

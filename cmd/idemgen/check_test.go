package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck: `idemgen check` warns on a GET with a request body, with its
// line and what to do, and exits 0 (1 with -strict); a GET marked
// x-idempotency is an error, which the generator refuses too, and says to
// remove the extension or make the operation a POST.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	body := write("body.yaml", `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /unsubscribe:
    get:
      operationId: unsubscribe
      requestBody:
        content: {application/json: {schema: {type: object, properties: {token: {type: string}}}}}
      responses: {"200": {description: unsubscribed}}
`)
	code, out, errs := runCLI(t, "check", body)
	want := body + `:5: GET /unsubscribe (unsubscribe): a request body on a GET has no meaning (RFC 9110), and proxies, caches and clients may drop it; ` +
		`a GET that needs one usually changes state: make it a POST (docs/testing.md, "A GET that changes state"), or move the body's values into query parameters`
	if code != 0 || !strings.Contains(out, "warning: "+want+"\n") || !strings.Contains(out, "0 errors, 1 warnings") {
		t.Errorf("check of a GET with a body: exit %d; want 0 and the warning\n%s\n---\n%s%s", code, want, out, errs)
	}
	if code, _, errs := runCLI(t, "check", "-strict", body); code != 1 || !strings.Contains(errs, "1 warning(s) with -strict") {
		t.Errorf("check -strict of a GET with a body: exit %d; want 1\n%s", code, errs)
	}

	keyed := write("keyed.yaml", `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /confirm:
    get:
      operationId: confirm
      x-idempotency: true
      parameters: [{name: token, in: query, required: true, schema: {type: string}}]
      responses: {"200": {description: confirmed}}
`)
	code, out, errs = runCLI(t, "check", keyed)
	want = keyed + `:7: GET /confirm (confirm): x-idempotency: not allowed on GET: a GET must change nothing, so it is idempotent by definition and needs no key; ` +
		`remove x-idempotency, or, if the operation changes state, make it a POST (docs/testing.md, "A GET that changes state")`
	if code != 1 || !strings.Contains(out, "error: "+want+"\n") || !strings.Contains(errs, "1 error(s)") {
		t.Errorf("check of a GET with x-idempotency: exit %d; want 1 and the error\n%s\n---\n%s%s", code, want, out, errs)
	}
}

package gen

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCommentLines(t *testing.T) {
	got := commentLines(30, "CreatePayment serves "+nobreak("POST /payments/{id}/refunds")+" with the engine.", "", "  ", "Charge a\ncard.", nobreak("POST /payments"))
	want := []string{
		"// CreatePayment serves",
		"// POST /payments/{id}/refunds",
		"// with the engine.",
		"//",
		"// Charge a card.",
		"//",
		"// POST /payments",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, l := range commentLines(40, strings.Repeat("word ", 30)) {
		if len(l) > 40 {
			t.Errorf("%q is longer than 40", l)
		}
	}
	if got := commentLines(40, "", " "); got != nil {
		t.Errorf("empty paragraphs: %q", got)
	}
}

package idemhttp

import (
	"net/http"
	"testing"
	"time"
)

func TestPreferWait(t *testing.T) {
	for _, c := range []struct {
		fields []string
		want   time.Duration
		ok     bool
	}{
		{nil, 0, false},
		{[]string{"wait=5"}, 5 * time.Second, true},
		{[]string{"WAIT = 7"}, 7 * time.Second, true},
		{[]string{"wait=0"}, 0, true},
		{[]string{`respond-async, wait="3"`}, 3 * time.Second, true},
		{[]string{"handling=lenient; x=\"a,b\", wait=4;foo"}, 4 * time.Second, true},
		{[]string{"return=minimal", "wait=9"}, 9 * time.Second, true},
		{[]string{"wait=2, wait=8"}, 2 * time.Second, true}, // the first counts (RFC 7240, section 2)
		{[]string{"wait=soon"}, 0, false},
		{[]string{"wait=-1"}, 0, false},
		{[]string{"wait=1.5"}, 0, false},
		{[]string{"wait"}, 0, false},
		{[]string{"waiting=5"}, 0, false},
		{[]string{"x=\"wait=5\""}, 0, false},
		{[]string{"wait=99999999999999999999"}, maxIntentAge * time.Second, true},
	} {
		h := http.Header{}
		for _, f := range c.fields {
			h.Add("Prefer", f)
		}
		got, ok := PreferWait(h)
		if got != c.want || ok != c.ok {
			t.Errorf("Prefer %q: got %v, %v; want %v, %v", c.fields, got, ok, c.want, c.ok)
		}
	}
}

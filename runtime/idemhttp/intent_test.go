package idemhttp

import (
	"net/http"
	"testing"
	"time"
)

func TestIntentAge(t *testing.T) {
	for _, tc := range []struct {
		values []string
		age    time.Duration
		ok     bool
	}{
		{nil, 0, false},
		{[]string{"0"}, 0, true},
		{[]string{"37"}, 37 * time.Second, true},
		{[]string{"99999999999999999999"}, maxIntentAge * time.Second, true},
		{[]string{""}, 0, false},
		{[]string{"-1"}, 0, false},
		{[]string{"1.5"}, 0, false},
		{[]string{" 3"}, 0, false},
		{[]string{"3", "4"}, 0, false},
	} {
		h := http.Header{}
		for _, v := range tc.values {
			h.Add(IntentAgeHeader, v)
		}
		if age, ok := IntentAge(h); age != tc.age || ok != tc.ok {
			t.Errorf("IntentAge(%q) = %v, %t; want %v, %t", tc.values, age, ok, tc.age, tc.ok)
		}
	}
}

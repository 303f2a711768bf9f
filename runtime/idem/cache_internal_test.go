package idem

import (
	"strconv"
	"testing"
	"time"
)

// TestReplayCacheEvictsLeastRecentlyUsed: past its bytes, the cache drops
// the entry used longest ago, a get counting as a use; expired entries are
// never returned; replacing a key keeps one entry.
func TestReplayCacheEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	resp := &Response{Status: 200}
	key := func(i int) cacheKey { return cacheKey{"ns", "s", strconv.Itoa(i), ""} }
	// An entry is 256 bytes and its strings' (262 here); one may take an
	// eighth of the cache: this one holds eight.
	rc := newReplayCache(8 * 262)
	later := time.Now().Add(time.Hour)
	for i := range 8 {
		rc.put(key(i), "op", nil, resp, later, time.Now())
	}
	if rc.get(key(0)) == nil { // 0 is now the most recently used
		t.Fatal("0 is missing")
	}
	rc.put(key(8), "op", nil, resp, later, time.Now()) // evicts 1
	for i := range 9 {
		if got, want := rc.get(key(i)) != nil, i != 1; got != want {
			t.Errorf("%d cached: %t, want %t", i, got, want)
		}
	}
	rc.put(key(8), "oq", nil, resp, later, time.Now())
	if ent := rc.get(key(8)); ent == nil || ent.operation != "oq" {
		t.Errorf("replaced 8: %+v", ent)
	}
	if n := len(rc.index); n != 8 {
		t.Errorf("%d entries, want 8", n)
	}
	rc.put(key(9), "op", nil, resp, time.Now().Add(-time.Second), time.Now())
	if rc.get(key(9)) != nil {
		t.Error("an expired entry was returned")
	}
	// The list and the index agree.
	n := 0
	for ent := rc.lru.next; ent != &rc.lru; ent = ent.next {
		if rc.index[ent.id] != ent {
			t.Errorf("%v in the list but not the index", ent.id)
		}
		n++
	}
	if n != len(rc.index) {
		t.Errorf("list of %d, index of %d", n, len(rc.index))
	}
}

package idem

import (
	"hash/maphash"
	"sync"
	"time"
)

// sameRequestSlots is how many requests the sketch remembers at most:
// 2^14 slots of 24 bytes, 384 KiB whatever the number of keys.
const sameRequestSlots = 1 << 14

// requestSketch remembers, for recently claimed requests, which key
// claimed each (namespace, scope, fingerprint), so that a new key claimed
// for a request that another key claimed within the window is seen: the
// mark of a client that mints a key per attempt (its every retry is a new
// execution). It is direct-mapped: a request's slot is chosen by its hash
// and overwritten by whatever request hashes there next, so its memory is
// fixed, and a collision only makes it forget a request, never take one
// for another (both the request's and the key's 64-bit hashes must match
// before it speaks).
type requestSketch struct {
	window time.Duration
	seed   maphash.Seed
	locks  [64]sync.Mutex // striped over the slots
	slots  []sketchSlot
}

type sketchSlot struct {
	request, key uint64
	at           int64 // unix nanoseconds of the claim
}

func newRequestSketch(window time.Duration) *requestSketch {
	if window < 0 {
		return nil
	}
	return &requestSketch{window: window, seed: maphash.MakeSeed(), slots: make([]sketchSlot, sameRequestSlots)}
}

// claimed records that key claimed the request (ns, scope, fingerprint)
// now, and reports whether another key claimed the same request within
// the window.
func (s *requestSketch) claimed(ns, scope, key string, fingerprint []byte, now time.Time) bool {
	if s == nil {
		return false
	}
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(ns)
	h.WriteByte(0)
	h.WriteString(scope)
	h.WriteByte(0)
	h.Write(fingerprint)
	request := h.Sum64()
	h.Reset()
	h.WriteString(key)
	keyHash := h.Sum64()
	i := request & (sameRequestSlots - 1)
	mu := &s.locks[i%uint64(len(s.locks))]
	mu.Lock()
	slot := &s.slots[i]
	again := slot.request == request && slot.key != keyHash && now.UnixNano()-slot.at <= int64(s.window)
	*slot = sketchSlot{request: request, key: keyHash, at: now.UnixNano()}
	mu.Unlock()
	return again
}

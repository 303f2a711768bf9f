package idem

import (
	"sync"
	"time"
)

// DefaultReplayCacheBytes is Options.ReplayCacheBytes' default.
const DefaultReplayCacheBytes = 32 << 20

// replayCache holds completed responses in process, so that a replay costs
// no round trip to the store. It is safe across instances because a
// completed record never changes until it expires: nothing but the pruner
// touches it, and only after expires_at. An entry is never served past
// the record's expiry, and is checked against the request's fingerprint
// and operation like the record itself (a mismatch is still 422).
type replayCache struct {
	mu    sync.Mutex
	max   int64
	size  int64
	lru   cacheEntry // the list's sentinel: lru.next is the most recently used
	index map[cacheKey]*cacheEntry
}

// cacheKey is a record's key: (namespace, scope, key).
// cacheKey is a record's key: its namespace, scope and key, and the
// placement its operation gave (KeyedRequest.Placement), with which the
// same three name another record.
type cacheKey struct{ ns, scope, key, placement string }

type cacheEntry struct {
	id          cacheKey
	operation   string
	fingerprint []byte
	resp        *Response
	expires     time.Time
	stored      time.Time // when the record's answer was stored
	size        int64
	prev, next  *cacheEntry // in the LRU list
}

func newReplayCache(max int64) *replayCache {
	if max <= 0 {
		return nil
	}
	rc := &replayCache{max: max, index: map[cacheKey]*cacheEntry{}}
	rc.lru.prev, rc.lru.next = &rc.lru, &rc.lru
	return rc
}

// get returns the entry for id, or nil; expired entries are dropped.
func (rc *replayCache) get(id cacheKey) *cacheEntry {
	if rc == nil {
		return nil
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	ent, ok := rc.index[id]
	if !ok {
		return nil
	}
	if !time.Now().Before(ent.expires) {
		rc.remove(ent)
		return nil
	}
	rc.unlink(ent)
	rc.pushFront(ent)
	return ent
}

// put remembers until expires a completed response, stored at stored.
func (rc *replayCache) put(id cacheKey, operation string, fingerprint []byte, resp *Response, expires, stored time.Time) {
	if rc == nil {
		return
	}
	size := int64(len(id.ns)+len(id.scope)+len(id.key)+len(id.placement)+len(operation)+len(fingerprint)+len(resp.Body)) + 256
	for k, vs := range resp.Header {
		size += int64(len(k))
		for _, v := range vs {
			size += int64(len(v))
		}
	}
	if size > rc.max/8 {
		return // one response may not crowd out the rest
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if ent, ok := rc.index[id]; ok {
		rc.remove(ent)
	}
	ent := &cacheEntry{id: id, operation: operation, fingerprint: fingerprint, resp: resp, expires: expires, stored: stored, size: size}
	rc.index[id] = ent
	rc.pushFront(ent)
	rc.size += size
	for rc.size > rc.max {
		rc.remove(rc.lru.prev)
	}
}

func (rc *replayCache) pushFront(ent *cacheEntry) {
	ent.prev, ent.next = &rc.lru, rc.lru.next
	ent.prev.next, ent.next.prev = ent, ent
}

func (rc *replayCache) unlink(ent *cacheEntry) {
	ent.prev.next, ent.next.prev = ent.next, ent.prev
	ent.prev, ent.next = nil, nil
}

func (rc *replayCache) remove(ent *cacheEntry) {
	rc.unlink(ent)
	delete(rc.index, ent.id)
	rc.size -= ent.size
}

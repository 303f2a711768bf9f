package idem

import (
	"container/list"
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
	lru   *list.List // of *cacheEntry, most recently used first
	index map[string]*list.Element
}

type cacheEntry struct {
	id          string
	operation   string
	fingerprint []byte
	resp        *Response
	expires     time.Time
	size        int64
}

func newReplayCache(max int64) *replayCache {
	if max <= 0 {
		return nil
	}
	return &replayCache{max: max, lru: list.New(), index: map[string]*list.Element{}}
}

func cacheID(ns, scope, key string) string { return ns + "\x00" + scope + "\x00" + key }

// get returns the entry for id, or nil; expired entries are dropped.
func (rc *replayCache) get(id string) *cacheEntry {
	if rc == nil {
		return nil
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	el, ok := rc.index[id]
	if !ok {
		return nil
	}
	ent := el.Value.(*cacheEntry)
	if !time.Now().Before(ent.expires) {
		rc.remove(el)
		return nil
	}
	rc.lru.MoveToFront(el)
	return ent
}

// put remembers a completed response until expires.
func (rc *replayCache) put(id, operation string, fingerprint []byte, resp *Response, expires time.Time) {
	if rc == nil {
		return
	}
	size := int64(len(id)+len(operation)+len(fingerprint)+len(resp.Body)) + 256
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
	if el, ok := rc.index[id]; ok {
		rc.remove(el)
	}
	rc.index[id] = rc.lru.PushFront(&cacheEntry{id: id, operation: operation, fingerprint: fingerprint, resp: resp,
		expires: expires, size: size})
	rc.size += size
	for rc.size > rc.max {
		rc.remove(rc.lru.Back())
	}
}

func (rc *replayCache) remove(el *list.Element) {
	ent := rc.lru.Remove(el).(*cacheEntry)
	delete(rc.index, ent.id)
	rc.size -= ent.size
}

package idem

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

func TestRequestSketch(t *testing.T) {
	s := newRequestSketch(time.Minute)
	now := time.Now()
	fp := []byte("fingerprint")
	if s.claimed("ns", "acct", "k1", fp, now) {
		t.Fatal("a first claim was taken for a repeat")
	}
	if s.claimed("ns", "acct", "k1", fp, now) {
		t.Fatal("the same key again was taken for a new key")
	}
	if s.claimed("ns", "other", "k2", fp, now) {
		t.Fatal("another scope's request was taken for the same")
	}
	if !s.claimed("ns", "acct", "k2", fp, now.Add(30*time.Second)) {
		t.Fatal("a new key for the same request within the window was not seen")
	}
	if s.claimed("ns", "acct", "k3", fp, now.Add(2*time.Minute)) {
		t.Fatal("a new key after the window was taken for a repeat")
	}
	if newRequestSketch(-1).claimed("ns", "acct", "k4", fp, now) {
		t.Fatal("a sketch turned off spoke")
	}
}

// BenchmarkRequestSketch claims 100,000 distinct keys (each its own
// request) per iteration, and reports the heap the sketch holds after
// them: fixed, whatever the number of keys.
func BenchmarkRequestSketch(b *testing.B) {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := newRequestSketch(time.Minute)
	now := time.Now()
	b.ResetTimer()
	for range b.N {
		for i, k := range keys {
			s.claimed("ns", "acct", k, []byte(k), now.Add(time.Duration(i)))
		}
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc)-float64(before.HeapAlloc), "sketch-heap-B")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(keys)), "ns/claim")
	runtime.KeepAlive(s)
	runtime.KeepAlive(keys)
}

package fsm

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// BenchmarkApplyMulti applies entries of 16 multis of 4 creates of
// 100-byte znodes, as a busy shard's leader does, to a tree that already
// holds 100,000 znodes: the state machine's own cost of a write, which
// every member pays (go test -bench ApplyMulti -benchmem ./keeper/fsm).
func BenchmarkApplyMulti(b *testing.B) {
	h := newHarness(b)
	c := h.session(m1)
	data := make([]byte, 100)
	h.ok(c.create("/fill", nil, 0))
	for i := range 1000 {
		reqs := make([]Request, 100)
		for j := range reqs {
			reqs[j] = c.create(fmt.Sprintf("/fill/k%06d", i*100+j), data, 0)
		}
		h.mustApply(reqs...)
	}
	h.ok(c.create("/multi", nil, 0))
	n := 0
	entry := func() []byte {
		reqs := make([]Request, 16)
		for i := range reqs {
			ops := make([]proto.MultiOp, 4)
			for j := range ops {
				n++
				ops[j] = proto.MultiOp{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: fmt.Sprintf("/multi/k%09d", n), Data: data, ACL: openACL}}
			}
			reqs[i] = c.multi(ops...)
			reqs[i].ID = uint64(n)
		}
		return h.entryOf(reqs...)
	}
	benchApply(b, h, entry)
}

// benchApply applies an entry of entry() per iteration, timing only the
// apply, and reports the heap the applies left reachable, per entry.
func benchApply(b *testing.B, h *harness, entry func() []byte) {
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for b.Loop() {
		b.StopTimer()
		e := entry()
		b.StartTimer()
		if _, _, err := h.s.Apply(e); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(h)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(b.N), "retained-B/op")
}

// entryOf returns an entry of reqs, 10 ms after the harness's last.
func (h *harness) entryOf(reqs ...Request) []byte {
	h.wall += 10
	return EncodeEntry(nil, h.wall, reqs)
}

// BenchmarkApplyLargeACL applies the largest ACLs a client may send:
// 42,000 distinct digest entries (1 MiB) in a create under a missing
// parent, which entries older than version 9 carry without the bound, and
// setACLs of MaxACLEntries fresh entries of 0.85 MB, each replacing the
// last (go test -bench ApplyLargeACL -benchmem -benchtime 20x ./keeper/fsm).
func BenchmarkApplyLargeACL(b *testing.B) {
	b.Run("create-42000-entries", func(b *testing.B) {
		h := newHarness(b)
		c := h.session(m1)
		acl := distinctACL(42_000, 0)
		benchApply(b, h, func() []byte { return h.entryOf(c.createACL("/missing/x", acl, 0)) })
	})
	b.Run("setACL-1024-entries", func(b *testing.B) {
		h := newHarness(b)
		c := h.session(m1).as(superID)
		h.ok(c.create("/p", nil, 0))
		n := 0
		benchApply(b, h, func() []byte {
			n++
			r := numbered(c.setACL("/p", distinctACL(MaxACLEntries, 800+n%1000), -1))[0]
			r.Seq = uint64(n)
			return h.entryOf(r)
		})
	})
}

// BenchmarkApplyEphemeralChurn applies one multi that creates 14,000
// ephemerals and deletes them (a 1 MiB request).
func BenchmarkApplyEphemeralChurn(b *testing.B) {
	h := newHarness(b)
	c := h.session(m1)
	h.ok(c.create("/e", nil, 0))
	ops := ephemeralChurn(14_000)
	benchApply(b, h, func() []byte { return h.entryOf(c.multi(ops...)) })
}

// BenchmarkApplySessionBesideLargeWrite applies entries that each create a
// session beside a refused 1 MiB setData; retained-B/op is what each live
// session keeps.
func BenchmarkApplySessionBesideLargeWrite(b *testing.B) {
	h := newHarness(b)
	c := h.session(m1)
	big := make([]byte, 1<<20)
	benchApply(b, h, func() []byte {
		return h.entryOf(openSession(m1, 30000, []byte("0123456789abcdef")), c.setData("/missing", big, -1))
	})
}

// BenchmarkEncodeIdentities encodes a batch of 256 numbered writes from 16
// connections, each with an ip and a digest identity: with the identity
// table (version 11) and with the lists in every request (version 10),
// reporting the entry's bytes beside the time.
func BenchmarkEncodeIdentities(b *testing.B) {
	reqs := make([]Request, 256)
	lists := make([][]proto.ID, 16)
	for i := range lists {
		lists[i] = []proto.ID{localIP, {Scheme: "digest", ID: fmt.Sprintf("user%d:%s", i, strings.Repeat("h", 28))}}
	}
	for i := range reqs {
		reqs[i] = testClient{sess: int64(i % 16), member: m1}.as(lists[i%16]...).create(fmt.Sprintf("/n%d", i), []byte("0123456789"), 0)
	}
	reqs = numbered(reqs...)
	for name, encode := range map[string]func([]byte) []byte{
		"table":    func(buf []byte) []byte { return EncodeEntry(buf, 1, reqs) },
		"no table": func(buf []byte) []byte { return encodeEntry(buf, 1, reqs, entryExtensions) },
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var entry []byte
			for b.Loop() {
				entry = encode(entry[:0])
			}
			b.ReportMetric(float64(len(entry)), "entry-bytes")
		})
	}
}

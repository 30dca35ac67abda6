package fsm

import (
	"fmt"
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
		h.wall += 10
		return EncodeEntry(nil, h.wall, reqs)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		e := entry()
		b.StartTimer()
		if _, _, err := h.s.Apply(e); err != nil {
			b.Fatal(err)
		}
	}
}

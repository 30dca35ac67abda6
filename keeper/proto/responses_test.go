package proto

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestChildrenFramePartsAreTheFrame: the parts of a children reply, sent
// one after the other, are the frame AppendFrame makes, with and without
// a Stat and a kept Vector, after bytes already in the buffer; the Vector
// is sent as it is, not copied.
func TestChildrenFramePartsAreTheFrame(t *testing.T) {
	children := []string{"a", "bb", "ccc"}
	vector := Marshal(&ChildrenResponse{Children: children})
	h := &ReplyHeader{Xid: 7, Zxid: 42}
	for _, withStat := range []bool{false, true} {
		for _, kept := range []bool{false, true} {
			r := &ChildrenResponse{Children: children, Stat: Stat{Czxid: 5, NumChildren: 3}, WithStat: withStat}
			if kept {
				r.Vector = vector
			}
			want := AppendFrame([]byte("prefix"), h, &ChildrenResponse{Children: children, Stat: r.Stat, WithStat: withStat})
			head, vec, tail := r.AppendFrameParts([]byte("prefix"), h)
			assert.Equal(t, want, slices.Concat(head, vec, tail), "stat %v, vector kept %v", withStat, kept)
			if kept {
				require.NotEmpty(t, vec)
				assert.Same(t, &vector[0], &vec[0], "the kept vector is copied")
			} else {
				assert.Nil(t, vec)
				assert.Nil(t, tail)
			}
		}
	}
}

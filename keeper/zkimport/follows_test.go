package zkimport

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFollows: the next transaction of an epoch, or the first of a later
// one (a new leader counts from 1), follows; anything else leaves a gap.
func TestFollows(t *testing.T) {
	const e1, e2 = int64(1) << 32, int64(2) << 32
	for _, c := range []struct {
		prev, next int64
		want       bool
	}{
		{e1 + 5, e1 + 6, true},
		{e1 + 5, e1 + 7, false},
		{e1 + 5, e2 + 1, true},
		{e1 + 5, e2, true},
		{e1 + 5, e2 + 2, false},
		{e2 + 1, e1 + 9, false},
	} {
		assert.Equal(t, c.want, follows(c.prev, c.next), "%#x then %#x", c.prev, c.next)
	}
}

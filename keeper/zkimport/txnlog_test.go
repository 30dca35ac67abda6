package zkimport

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// TestDamagedACLCountFailsTheImport: a create or setACL transaction whose
// ACL count its bytes cannot hold is an error, never a znode imported with
// no ACL (open to everyone once it reaches a shard).
func TestDamagedACLCountFailsTheImport(t *testing.T) {
	for _, count := range []int32{-5, 3, 1 << 17} {
		create := proto.NewEncoder(nil)
		create.String("/x")
		create.Buffer([]byte("data"))
		create.Int32(count)
		create.Bool(false)
		create.Int32(0)
		setACL := proto.NewEncoder(nil)
		setACL.String("/")
		setACL.Int32(count)
		setACL.Int32(0)
		for typ, body := range map[int32][]byte{txnCreate: create.Bytes(), txnSetACL: setACL.Bytes()} {
			tree := newDataTree()
			err := tree.applyTxn(proto.NewDecoder(body), typ, 1, 2, 3)
			require.Error(t, err, "type %d with an ACL count of %d", typ, count)
			assert.NotContains(t, tree.nodes, "/x")
		}
	}
}

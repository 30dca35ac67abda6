package xshard

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// TestRetryFromAnotherAddressOwnsItsTransaction: a retry of a transaction
// from another address (a client that reconnected elsewhere) is its
// caller's, so it is answered with the transaction's outcome; another
// identity is not.
func TestRetryFromAnotherAddressOwnsItsTransaction(t *testing.T) {
	alice := proto.ID{Scheme: "digest", ID: "alice:x"}
	prep := &proto.XPrepareRequest{ID: "t", Coordinator: "a", Shards: []string{"a", "b"},
		IDs: []proto.ID{{Scheme: "ip", ID: "10.0.0.2"}, alice}}
	rec := func(ids ...proto.ID) *proto.XRecord {
		return &proto.XRecord{Coordinator: "a", Shards: []string{"a", "b"}, IDs: ids}
	}
	from := rec(proto.ID{Scheme: "ip", ID: "10.0.0.1"}, alice)
	assert.Equal(t, []string{"a", "b"}, ownedBy(prep, []*proto.XRecord{from, from}), "another address, the same caller")
	other := rec(proto.ID{Scheme: "ip", ID: "10.0.0.2"}, proto.ID{Scheme: "digest", ID: "bob:y"})
	assert.Empty(t, ownedBy(prep, []*proto.XRecord{other, other}), "another identity")
	anonymous := &proto.XPrepareRequest{ID: "t", Coordinator: "a", Shards: []string{"a", "b"}, IDs: []proto.ID{{Scheme: "ip", ID: "10.0.0.2"}}}
	elsewhere := rec(proto.ID{Scheme: "ip", ID: "10.0.0.1"})
	assert.Empty(t, ownedBy(anonymous, []*proto.XRecord{elsewhere, elsewhere}), "callers without identities are told apart by address")
}

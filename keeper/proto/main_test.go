package proto

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRoundTrip encodes and decodes a record of every request type.
func TestRoundTrip(t *testing.T) {
	recs := []Record{
		&CreateRequest{Path: "/a", Data: []byte("x"), ACL: WorldACL(PermAll), Flags: 3},
		&SetACLRequest{Path: "/a", ACL: []ACL{{Perms: PermRead, ID: ID{Scheme: "digest", ID: "u:h"}}}, Version: 2},
		&MultiRequest{Ops: []MultiOp{{Op: OpCreate, Req: &CreateRequest{Path: "/m", ACL: WorldACL(PermAll)}},
			{Op: OpCheck, Req: &PathVersionRequest{Path: "/", Version: 0}}}},
		&XTransactionRequest{ID: "id", Coordinator: "a", Shards: []ShardOps{{Shard: "a"}}, TimeoutMs: 5},
		&XPrepareRequest{ID: "id", Coordinator: "a", Self: "b", Shards: []string{"a", "b"}, Deadline: 9,
			IDs: []ID{{Scheme: "ip", ID: "127.0.0.1"}}},
		&XRecord{ID: "id", Shards: []string{"a"}, Status: XCommitted, FailedOp: -1},
		&XTransactionResponse{Status: XFailed, FailedShard: "b", FailedOp: 1, Err: ErrBadVersion},
	}
	for _, r := range recs {
		b := Marshal(r)
		fresh := NewRequest(OpCreate)
		switch r.(type) {
		case *SetACLRequest:
			fresh = &SetACLRequest{}
		case *MultiRequest:
			fresh = &MultiRequest{}
		case *XTransactionRequest:
			fresh = &XTransactionRequest{}
		case *XPrepareRequest:
			fresh = &XPrepareRequest{}
		case *XRecord:
			fresh = &XRecord{}
		case *XTransactionResponse:
			fresh = &XTransactionResponse{}
		}
		if err := Unmarshal(b, fresh); err != nil {
			t.Fatalf("%T: %v", r, err)
		}
		if again := Marshal(fresh); string(again) != string(b) {
			t.Fatalf("%T does not round-trip", r)
		}
	}
}

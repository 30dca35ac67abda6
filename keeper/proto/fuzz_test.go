package proto

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// FuzzReadFrame feeds arbitrary bytes to the frame reader: it must never
// allocate past the limit or panic.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 44})
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff, 1, 2})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add(AppendFrame(nil, &RequestHeader{Xid: 1, OpCode: OpGetData}, &PathWatchRequest{Path: "/a", Watch: true}))
	f.Fuzz(func(t *testing.T, b []byte) {
		frame, err := ReadFrame(bytes.NewReader(b), 1024)
		if err == nil && len(frame) > 1024 {
			t.Fatalf("frame of %d bytes passed a 1024-byte limit", len(frame))
		}
		if len(b) >= 4 && int(uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3])) > 1024 &&
			!errors.Is(err, ErrFrameTooLarge) && b[0] < 0x80 {
			t.Fatalf("oversized frame not refused: %v", err)
		}
	})
}

// FuzzDecodeRequest decodes arbitrary bytes as every request record and
// the connect handshake: no panic, and whatever decodes re-encodes to a
// record that decodes to the same encoding.
func FuzzDecodeRequest(f *testing.F) {
	seeds := []Record{
		&CreateRequest{Path: "/a", Data: []byte("x"), ACL: WorldACL(PermAll), Flags: 3},
		&SetDataRequest{Path: "/a", Data: nil, Version: -1},
		&MultiRequest{Ops: []MultiOp{{Op: OpCreate, Req: &CreateRequest{Path: "/m", ACL: WorldACL(PermAll)}},
			{Op: OpDelete, Req: &PathVersionRequest{Path: "/m", Version: -1}},
			{Op: OpCheck, Req: &PathVersionRequest{Path: "/", Version: 0}}}},
		&SetWatchesRequest{RelativeZxid: 7, DataWatches: []string{"/a"}, ChildWatches: []string{"/"}},
		&SetACLRequest{Path: "/a", ACL: []ACL{{Perms: PermRead, ID: ID{Scheme: "digest", ID: "u:h"}}}},
		&AuthPacket{Scheme: "digest", Auth: []byte("u:p")},
		&ConnectRequest{Timeout: 30000, Passwd: make([]byte, 16)},
	}
	for i, s := range seeds {
		f.Add(int32(i), Marshal(s))
	}
	// The cross-shard protocol's records, at their index in ops below.
	xops := []ShardOps{{Shard: "a", Ops: MultiRequest{Ops: []MultiOp{{Op: OpSetData, Req: &SetDataRequest{Path: "/s", Version: -1}}}}}}
	f.Add(int32(21), Marshal(&XTransactionRequest{ID: "t", Coordinator: "a", Shards: xops}))
	f.Add(int32(22), Marshal(&XPrepareRequest{ID: "t", Coordinator: "a", Self: "a", Shards: []string{"a", "b"},
		Deadline: 1 << 40, Ops: xops, IDs: []ID{{Scheme: "super"}}}))
	f.Add(int32(23), Marshal(&XIDRequest{ID: "t"}))
	f.Add(int32(24), Marshal(&XStatusRequest{ID: "t", Coordinator: "a", Deadline: 5}))
	f.Add(int32(3), []byte{0xff, 0xff, 0xff, 0xf0})
	// ClickHouse Keeper's records, alone and in multis, at their index in ops.
	f.Add(int32(26), Marshal(FilteredList("/l", true, ListEphemeralOnly)))
	f.Add(int32(27), Marshal(&RemoveRecursiveRequest{Path: "/r", Limit: 1 << 31}))
	f.Add(int32(28), Marshal(&PathVersionRequest{Path: "/c", Version: -1}))
	f.Add(int32(29), Marshal(&CreateRequest{Path: "/n", ACL: WorldACL(PermAll)}))
	f.Add(int32(11), Marshal(&MultiRequest{Ops: []MultiOp{
		{Op: OpCreateIfNotExists, Req: &CreateRequest{Path: "/n", ACL: WorldACL(PermAll)}},
		{Op: OpCheckNotExists, Req: &PathVersionRequest{Path: "/c", Version: 2}},
		{Op: OpTryRemove, Req: &PathVersionRequest{Path: "/t", Version: -1}},
		{Op: OpRemoveRecursive, Req: &RemoveRecursiveRequest{Path: "/r", Limit: 100}}}}))
	f.Add(int32(14), Marshal(&MultiRequest{Ops: []MultiOp{
		{Op: OpExists, Req: &PathWatchRequest{Path: "/e"}}, {Op: OpGetChildren2, Req: &PathWatchRequest{Path: "/l"}},
		{Op: OpFilteredList, Req: FilteredList("/l", false, ListPersistentOnly)}}}))
	ops := []OpCode{OpCreate, OpDelete, OpExists, OpGetData, OpSetData, OpGetACL, OpSetACL, OpGetChildren,
		OpSync, OpGetChildren2, OpCheck, OpMulti, OpCreate2, OpCreateTTL, OpMultiRead, OpAuth, OpSetWatches,
		OpSetWatches2, OpAddWatch, OpGetEphemerals, OpGetAllChildrenNumber,
		OpXTransaction, OpXPrepare, OpXCommit, OpXStatus, OpXOutcome,
		OpFilteredList, OpRemoveRecursive, OpCheckNotExists, OpCreateIfNotExists, OpTryRemove}
	f.Fuzz(func(t *testing.T, which int32, b []byte) {
		var rec Record
		if which < 0 || int(which) >= len(ops) {
			rec = &ConnectRequest{}
		} else {
			rec = NewRequest(ops[which])
		}
		d := NewDecoder(b)
		rec.Decode(d)
		if d.Err() != nil {
			return
		}
		roundTrip(t, rec, newLike(rec, which, ops))
	})
}

// roundTrip requires rec, decoded from fuzz input, to encode to bytes that
// decode into fresh (a zero record of rec's type) as the same value (a nil
// list and an empty one are the same: both go on the wire as no elements)
// and encode to the same bytes again.
func roundTrip(t *testing.T, rec, fresh Record) {
	t.Helper()
	once := Marshal(rec)
	if err := Unmarshal(once, fresh); err != nil {
		t.Fatalf("re-encoded %T does not decode: %v", rec, err)
	}
	if !sameValue(reflect.ValueOf(rec), reflect.ValueOf(fresh)) {
		t.Fatalf("%T decodes to another value after a round trip:\n%#v\n%#v", rec, rec, fresh)
	}
	if twice := Marshal(fresh); !bytes.Equal(once, twice) {
		t.Fatalf("%T does not round-trip:\n%x\n%x", rec, once, twice)
	}
}

// sameValue reports whether a and b hold the same value, field by field,
// a nil slice equal to an empty one.
func sameValue(a, b reflect.Value) bool {
	if a.Kind() != b.Kind() {
		return false
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameValue(a.Elem(), b.Elem())
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !sameValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Struct:
		for i := range a.NumField() {
			if !sameValue(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	}
	return a.Equal(b)
}

func newLike(rec Record, which int32, ops []OpCode) Record {
	if _, ok := rec.(*ConnectRequest); ok {
		return &ConnectRequest{}
	}
	return NewRequest(ops[which])
}

// FuzzDecodeResponse decodes arbitrary bytes as the replies a client
// parses: no panic, and whatever decodes round-trips to the same value.
func FuzzDecodeResponse(f *testing.F) {
	f.Add(Marshal(&MultiResponse{Results: []MultiResult{{Op: OpCreate, Resp: &PathRequest{Path: "/a"}},
		{Op: OpError, Err: ErrNoNode}}}))
	f.Add(Marshal(&GetACLResponse{ACL: WorldACL(PermAll)}))
	f.Add(Marshal(&MultiResponse{Results: []MultiResult{{Op: OpCreateIfNotExists, Resp: &PathRequest{Path: "/n"}},
		{Op: OpCheckNotExists}, {Op: OpRemoveRecursive}, {Op: OpTryRemove}, {Op: OpExists, Resp: &StatResponse{}},
		{Op: OpGetChildren2, Resp: &ChildrenResponse{Children: []string{"a"}, WithStat: true}}}}))
	responses := []func() Record{
		func() Record { return &MultiResponse{} }, func() Record { return &GetACLResponse{} },
		func() Record { return &ChildrenResponse{WithStat: true} }, func() Record { return &GetDataResponse{} },
		func() Record { return &WhoAmIResponse{} }, func() Record { return &ConnectResponse{} },
		func() Record { return &WatcherEvent{} }, func() Record { return &ReplyHeader{} },
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, fresh := range responses {
			r := fresh()
			d := NewDecoder(b)
			r.Decode(d)
			if d.Err() == nil {
				roundTrip(t, r, fresh())
			}
		}
	})
}

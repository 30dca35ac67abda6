package proto

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPathsOfRequests(t *testing.T) {
	assert.Equal(t, []string{"/a"}, Paths(&CreateRequest{Path: "/a"}))
	assert.Equal(t, []string{"/a", "/b"}, Paths(&MultiRequest{Ops: []MultiOp{
		{Op: OpCreate, Req: &CreateRequest{Path: "/a"}}, {Op: OpDelete, Req: &PathVersionRequest{Path: "/b"}}}}))
	assert.Equal(t, []string{"/d", "/e", "/c", "/p"}, Paths(&SetWatchesRequest{DataWatches: []string{"/d"},
		ExistWatches: []string{"/e"}, ChildWatches: []string{"/c"}, PersistentWatches: []string{"/p"}}))
	assert.Empty(t, Paths(Empty{}))

	for _, req := range []Record{
		&PathWatchRequest{Path: EndpointSessions},
		&CreateRequest{Path: EndpointSessions + "/1"},
		&MultiRequest{Ops: []MultiOp{{Op: OpCheck, Req: &PathVersionRequest{Path: "/ok"}}, {Op: OpSetData, Req: &SetDataRequest{Path: EndpointSessions + "/x"}}}},
		&SetWatchesRequest{ChildWatches: []string{EndpointSessions}},
		&XTransactionRequest{Coordinator: "a", Shards: []ShardOps{{Shard: "a", Ops: MultiRequest{Ops: []MultiOp{
			{Op: OpSetData, Req: &SetDataRequest{Path: EndpointSessions + "/1"}}}}}}},
	} {
		assert.True(t, NamesEndpointSessions(req), "%#v", req)
	}
	for _, req := range []Record{&PathRequest{Path: EndpointSessions + "-other"}, &PathRequest{Path: "/"}, Empty{}} {
		assert.False(t, NamesEndpointSessions(req), "%#v", req)
	}
}

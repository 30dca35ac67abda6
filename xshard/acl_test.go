package xshard_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// TestACLParity runs a table of ACL cases once as a one-shard multi and
// once as a cross-shard transaction (the same ops on shard a, plus an op
// every caller may do on shard b): both give the same answer, checked
// against the caller's own authenticated identities on every shard,
// whatever the request carries.
func TestACLParity(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 3,
		Security: func(s *config.Security) { s.SuperDigest = fsm.DigestID("super:hunter2") }})
	digest := func(userPassword string, perms int32) proto.ACL {
		return proto.ACL{Perms: perms, ID: proto.ID{Scheme: "digest", ID: fsm.DigestID(userPassword)}}
	}
	nodes := map[string][]proto.ACL{
		"/open":      proto.WorldACL(proto.PermAll),
		"/readonly":  proto.WorldACL(proto.PermRead),
		"/alice":     {digest("alice:a", proto.PermAll)},
		"/alice-cr":  {digest("alice:a", proto.PermCreate|proto.PermRead)},
		"/alice-del": {digest("alice:a", proto.PermDelete|proto.PermRead), digest("bob:b", proto.PermCreate)},
		"/loopback":  {{Perms: proto.PermAll, ID: proto.ID{Scheme: "ip", ID: "127.0.0.0/8"}}},
		"/elsewhere": {{Perms: proto.PermAll, ID: proto.ID{Scheme: "ip", ID: "10.0.0.1"}}},
	}
	admin := router(t, c, "super:hunter2")
	for _, shard := range []string{"a", "b"} {
		cl, err := admin.Client(t.Context(), shard)
		require.NoError(t, err)
		for path, acl := range nodes {
			_, err := cl.Create(t.Context(), path, nil, 0, acl)
			require.NoError(t, err)
			_, err = cl.Create(t.Context(), path+"/child", nil, 0, proto.WorldACL(proto.PermAll))
			require.NoError(t, err)
		}
	}
	set := func(path string) proto.MultiOp {
		return proto.MultiOp{Op: proto.OpSetData, Req: &proto.SetDataRequest{Path: path, Data: []byte("x"), Version: -1}}
	}
	create := func(path string) proto.MultiOp {
		return proto.MultiOp{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: path, ACL: proto.WorldACL(proto.PermAll)}}
	}
	del := func(path string) proto.MultiOp {
		return proto.MultiOp{Op: proto.OpDelete, Req: &proto.PathVersionRequest{Path: path, Version: -1}}
	}
	cases := []struct {
		caller string // "user:password", or "" for no digest
		op     proto.MultiOp
		want   proto.Code
	}{
		{"", set("/open"), proto.ErrOK},
		{"", set("/readonly"), proto.ErrNoAuth},
		{"", create("/readonly/new"), proto.ErrNoAuth},
		{"", set("/alice"), proto.ErrNoAuth},
		{"alice:a", set("/alice"), proto.ErrOK},
		{"alice:wrong", set("/alice"), proto.ErrNoAuth},
		{"bob:b", set("/alice"), proto.ErrNoAuth},
		{"alice:a", create("/alice-cr/new"), proto.ErrOK},
		{"alice:a", set("/alice-cr"), proto.ErrNoAuth},
		{"alice:a", del("/alice-del/child"), proto.ErrOK},
		{"bob:b", del("/alice-del/child"), proto.ErrNoAuth},
		{"bob:b", create("/alice-del/new"), proto.ErrOK},
		{"", set("/loopback"), proto.ErrOK},
		{"", set("/elsewhere"), proto.ErrNoAuth},
		{"super:hunter2", set("/elsewhere"), proto.ErrOK},
		{"super:wrong", set("/alice"), proto.ErrNoAuth},
	}
	other := 0
	for i, tc := range cases {
		r := router(t, c, tc.caller)
		var got [2]proto.Code
		for j, cross := range []bool{false, true} {
			reqs := []xshard.MultiRequestForShard{{Shard: "a", Requests: []proto.MultiOp{tc.op}}}
			if cross {
				other++
				reqs = append(reqs, xshard.MultiRequestForShard{Shard: "b",
					Requests: []proto.MultiOp{create(fmt.Sprintf("/open/case-%d", other))}})
			}
			_, err := xshard.CrossShardTransaction(t.Context(), r, reqs)
			got[j] = proto.ErrOK
			if err != nil {
				var xe *xshard.Error
				require.True(t, errors.As(err, &xe), "case %d: %v", i, err)
				assert.Equal(t, "a", xe.Shard, "case %d", i)
				got[j] = xe.Code
			}
			// Undo what succeeded, so that every run starts from the same tree.
			if got[j] == proto.ErrOK {
				undo(t, admin, tc.op)
			}
		}
		assert.Equal(t, tc.want, got[0], "case %d (%s, %v %s) as a one-shard multi", i, tc.caller, tc.op.Op, path(tc.op))
		assert.Equal(t, got[0], got[1], "case %d (%s, %v %s): multi and cross-shard transaction disagree", i, tc.caller, tc.op.Op, path(tc.op))
	}
}

func router(t *testing.T, c *testenv.Cluster, userPassword string) *xshard.Router {
	var opts []client.Option
	if userPassword != "" {
		opts = append(opts, client.WithAuth("digest", []byte(userPassword)))
	}
	r := xshard.NewRouter(c.Config, testenv.TestLogger(t), opts...)
	t.Cleanup(r.Close)
	return r
}

func path(op proto.MultiOp) string {
	switch r := op.Req.(type) {
	case *proto.SetDataRequest:
		return r.Path
	case *proto.CreateRequest:
		return r.Path
	case *proto.PathVersionRequest:
		return r.Path
	}
	return "?"
}

// undo reverses a create or delete that both runs applied (setData needs
// no undo).
func undo(t *testing.T, admin *xshard.Router, op proto.MultiOp) {
	cl, err := admin.Client(t.Context(), "a")
	require.NoError(t, err)
	switch r := op.Req.(type) {
	case *proto.CreateRequest:
		require.NoError(t, cl.Delete(t.Context(), r.Path, -1))
	case *proto.PathVersionRequest:
		_, err := cl.Create(t.Context(), r.Path, nil, 0, proto.WorldACL(proto.PermAll))
		require.NoError(t, err)
	}
}

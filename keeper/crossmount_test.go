package keeper_test

// Containers, TTL modes and ephemerals in multis across mounts and at mount
// points, through a node's endpoint (issue 38): against ZooKeeper 3.8 where
// xkeeper does as it does, and on the shards where it refuses.

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// crossMountCases run under /xN, N the case's index, with the mount
// points crossMountDirs name under it, on shard b.
var crossMountCases = []compatCase{
	{"containers-across-mounts", caseContainersAcrossMounts},
	{"container-and-ttl-mount-points", caseContainerAndTTLMountPoints},
	{"create2-mount-point", caseCreate2MountPoint},
}

// crossMountDirs are each case's mount points, under its prefix.
var crossMountDirs = []string{"/k/m", "/j/m", "/j/t", "/n/m"}

func crossMountPrefix(i int, _ string) string { return fmt.Sprintf("/x%d", i) }

// ephemeralMountPoint is a mount point (on shard b) that
// TestEndpointCreateModesAcrossMounts creates ephemeral.
const ephemeralMountPoint = "/eph/m"

// TestEndpointCreateModesAcrossMounts runs crossMountCases through a
// node's endpoint (two shards) and on ZooKeeper 3.8, and requires the
// same answers; then it checks on the shards that the containers the
// multis made are containers, and that a multi creating or deleting an
// ephemeral mount point is refused with BadArguments and changes nothing
// (ZooKeeper would apply it: a cross-shard transaction takes no ephemeral,
// DESIGN-NOTES "Mount points"), while the same create alone is done.
func TestEndpointCreateModesAcrossMounts(t *testing.T) {
	zkServer := testenv.StartZooKeeper(t, 1)
	mounts := append(caseMounts(crossMountCases, crossMountDirs, crossMountPrefix), config.Mount{Path: ephemeralMountPoint, Shard: "b"})
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Nodes: 1, Mounts: mounts})
	t.Cleanup(c.Stop)
	ep := c.Endpoint(c.Config.Nodes[0].Name)
	t.Run("as-zookeeper", func(t *testing.T) { // returns once its parallel cases have run
		runCompatCases(t, c, []string{ep}, zkServer.Servers(), crossMountCases, crossMountPrefix)
	})

	prefix := crossMountPrefix(0, "")
	for _, want := range []struct{ shard, path string }{
		{"b", prefix + "/k/m/c"}, {"a", prefix + "/k/c"},
	} {
		owner, ok := ownerOn(t, c, want.shard, want.path)
		if assert.True(t, ok, "%s on shard %s", want.path, want.shard) {
			assert.Equal(t, fsm.ContainerOwner, owner, "%s on shard %s is a container", want.path, want.shard)
		}
	}

	conn := connectZK(t, []string{ep}, 5*time.Second)
	parent := ephemeralMountPoint[:len(ephemeralMountPoint)-2]
	_, err := conn.Multi(&zk.CreateRequest{Path: parent, Acl: world},
		&zk.CreateRequest{Path: ephemeralMountPoint, Acl: world, Flags: zk.FlagEphemeral})
	assert.ErrorIs(t, err, zk.ErrBadArguments, "a multi creating a parent and an ephemeral mount point under it")
	for _, shard := range []string{"a", "b"} {
		assert.False(t, existsOn(t, c, shard, parent+"/m"), "no mount point nor placeholder on shard %s", shard)
		if shard == "a" {
			assert.False(t, existsOn(t, c, shard, parent), "the refused multi created no parent")
		}
	}
	_, err = conn.Create(parent, nil, 0, world)
	require.NoError(t, err)
	_, err = conn.Multi(&zk.CreateRequest{Path: ephemeralMountPoint, Acl: world, Flags: zk.FlagEphemeral})
	assert.ErrorIs(t, err, zk.ErrBadArguments, "a multi creating an ephemeral mount point")
	kids, st, err := conn.Children(parent)
	require.NoError(t, err)
	assert.Empty(t, kids)
	assert.Zero(t, st.Cversion, "the refused multi left the parent's cversion")

	_, err = conn.Create(ephemeralMountPoint, nil, zk.FlagEphemeral, world)
	require.NoError(t, err, "an ephemeral mount point alone")
	_, err = conn.Multi(&zk.DeleteRequest{Path: ephemeralMountPoint, Version: -1})
	assert.ErrorIs(t, err, zk.ErrBadArguments, "a multi deleting an ephemeral mount point")
	for _, shard := range []string{"a", "b"} {
		assert.True(t, existsOn(t, c, shard, ephemeralMountPoint), "the refused delete left it on shard %s", shard)
	}
	require.NoError(t, conn.Delete(ephemeralMountPoint, -1), "deleted alone")
}

// caseMounts mounts, on shard b, each of dirs under each case's prefix.
func caseMounts(cases []compatCase, dirs []string, prefix func(int, string) string) []config.Mount {
	var mounts []config.Mount
	for i, c := range cases {
		for _, m := range dirs {
			mounts = append(mounts, config.Mount{Path: prefix(i, c.name) + m, Shard: "b"})
		}
	}
	return mounts
}

// ownerOn returns the owner of path in the state of shard's leader
// (fsm.ContainerOwner for a container), and whether path exists there.
func ownerOn(t *testing.T, c *testenv.Cluster, shard, path string) (owner int64, ok bool) {
	t.Helper()
	c.Member(c.WaitLeader(shard)).Replica.View(func(st *fsm.State) {
		if n := st.Node(path); n != nil {
			owner, ok = n.Owner, true
		}
	})
	return owner, ok
}

// caseContainersAcrossMounts (issue 38): a multi across mounts creates a
// container on each shard, with children, all at once; one whose last op
// fails creates none.
func caseContainersAcrossMounts(d *driver) {
	z, k := d.zk, d.p("/k")
	for _, p := range []string{k, k + "/m"} {
		_, err := z.Create(p, nil, 0, world)
		d.rec("create %s: %s", p, errStr(err))
	}
	rc := d.raw("raw")
	container := func(path string) proto.MultiOp { return mCreate(proto.OpCreateContainer, path, proto.FlagContainer) }
	d.recMultiRaw(rc, "a container on each shard, with a child each",
		container(k+"/m/c"), container(k+"/c"), mCreate(proto.OpCreate, k+"/m/c/x", 0), mCreate(proto.OpCreate, k+"/c/x", 0))
	d.children("after it", k)
	d.children("after it", k+"/m")
	d.children("after it", k+"/m/c")
	d.children("after it", k+"/c")
	d.recMultiRaw(rc, "a container on each shard, then an op that fails",
		container(k+"/m/d"), container(k+"/d"), mCreate(proto.OpCreate, k+"/c", 0))
	d.recMultiRaw(rc, "a container on each shard, failing on the mounted shard first",
		container(k+"/d"), mPathVersion(proto.OpCheck, k+"/m", 5), container(k+"/m/d"))
	d.exists("after the failed multis", k+"/d")
	d.exists("after the failed multis", k+"/m/d")
	d.children("after the failed multis", k)
	d.children("after the failed multis", k+"/m")
	d.recMultiRaw(rc, "an ephemeral container flag is an ephemeral, on one shard",
		mCreate(proto.OpCreateContainer, k+"/m/e", proto.FlagEphemeral))
	d.exists("the ephemeral", k+"/m/e")
}

// caseContainerAndTTLMountPoints (issue 38): a multi may create a parent
// and a container mount point under it, as ZooKeeper does; a container
// mount point is deleted and created alone; a TTL create at a mount point
// (TTL nodes are off) fails and leaves the parent's cversion.
func caseContainerAndTTLMountPoints(d *driver) {
	z, j := d.zk, d.p("/j")
	rc := d.raw("raw")
	_, out := rc.do(proto.OpCreateContainer, &proto.CreateRequest{Path: j + "/m", ACL: proto.WorldACL(proto.PermAll),
		Flags: proto.FlagContainer}, &proto.Create2Response{})
	d.rec("a container mount point without its parent: %s", out)
	d.recMultiRaw(rc, "the parent, a container mount point and its child",
		mCreate(proto.OpCreate, j, 0), mCreate(proto.OpCreateContainer, j+"/m", proto.FlagContainer), mCreate(proto.OpCreate, j+"/m/x", 0))
	d.children("after it", j)
	d.children("after it", j+"/m")
	d.recMultiRaw(rc, "the container mount point again, and a new child",
		mCreate(proto.OpCreate, j+"/m/y", 0), mCreate(proto.OpCreateContainer, j+"/m", proto.FlagContainer))
	d.children("after the failed multi", j+"/m")
	d.rec("delete the child: %s", errStr(z.Delete(j+"/m/x", -1)))
	d.rec("delete the container mount point: %s", errStr(z.Delete(j+"/m", -1)))
	d.children("after the delete", j)
	resp := &proto.Create2Response{}
	_, out = rc.do(proto.OpCreateContainer, &proto.CreateRequest{Path: j + "/m", ACL: proto.WorldACL(proto.PermAll),
		Flags: proto.FlagContainer}, resp)
	d.rec("a container mount point alone: %s %s", out, resp.Path)
	d.children("after it", j)
	ttl := &proto.CreateTTLRequest{CreateRequest: proto.CreateRequest{Path: j + "/t", ACL: proto.WorldACL(proto.PermAll),
		Flags: proto.ModePersistentTTL}, TTL: 60000}
	_, out = rc.do(proto.OpCreateTTL, ttl, &proto.Create2Response{})
	d.rec("a TTL mount point alone: %s", out)
	d.children("after it", j)
	d.exists("the TTL mount point", j+"/t")
	d.recMultiRaw(rc, "a TTL mount point in a multi", proto.MultiOp{Op: proto.OpCreateTTL, Req: ttl})
	d.children("after it", j)
}

// caseCreate2MountPoint: a create2 of a mount point (a transaction with
// its placeholder's create) answers with the new znode's stat, the one a
// read then shows (before, with the multi result's path alone, which the
// client could not read as a create2's reply).
func caseCreate2MountPoint(d *driver) {
	z, n := d.zk, d.p("/n")
	_, err := z.Create(n, nil, 0, world)
	d.rec("create %s: %s", n, errStr(err))
	rc := d.raw("raw")
	for _, data := range [][]byte{nil, []byte("data")} {
		made := &proto.Create2Response{}
		_, out := rc.do(proto.OpCreate2, &proto.CreateRequest{Path: n + "/m", Data: data, ACL: proto.WorldACL(proto.PermAll)}, made)
		read := &proto.StatResponse{}
		_, exists := rc.do(proto.OpExists, &proto.PathWatchRequest{Path: n + "/m"}, read)
		st := made.Stat
		d.rec("create2 the mount point with %d bytes: %s %s version=%d cversion=%d aversion=%d owner=%d len=%d kids=%d; "+
			"a read then: %s, the same stat: %v, czxid=mzxid=pzxid: %v, ctime=mtime: %v", len(data), out, made.Path,
			st.Version, st.Cversion, st.Aversion, st.EphemeralOwner, st.DataLength, st.NumChildren,
			exists, st == read.Stat, st.Czxid == st.Mzxid && st.Mzxid == st.Pzxid, st.Ctime == st.Mtime)
		d.rec("delete it: %s", errStr(z.Delete(n+"/m", -1)))
	}
}

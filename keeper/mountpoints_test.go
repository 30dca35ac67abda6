package keeper_test

// Mount points through a node's endpoint, against ZooKeeper 3.8: a mount
// point lives on its shard and has a placeholder on the shard that holds
// its parent; creating or deleting one must answer, and change, what
// ZooKeeper's create or delete of a plain znode does (issue 38, items 2,
// 11 and 12).

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"

	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// mountPointCases run under /cN, N the case's index; every case has the
// mount points mountPointDirs name under its prefix, on shard b.
var mountPointCases = []compatCase{
	{"mount-point-delete-acl", caseMountPointDeleteACL},
	{"mount-point-with-its-parent", caseMountPointWithItsParent},
	{"failed-mount-point-create", caseFailedMountPointCreate},
	{"multi-failure-index-across-mounts", caseMultiFailureIndexAcrossMounts},
	{"sequential-at-a-mount-point", caseSequentialAtMountPoint},
	{"ephemeral-mount-point", caseEphemeralMountPoint},
}

// mountPointDirs are each case's mount points, under its prefix.
var mountPointDirs = []string{"/p/m", "/q/m", "/r/m", "/s/m", "/v/m", "/e/m"}

func mountPointPrefix(i int, _ string) string { return fmt.Sprintf("/c%d", i) }

// TestEndpointMountPointsAsZooKeeper runs mountPointCases through a node's
// endpoint (two shards, every case's mount points on shard b) and on
// ZooKeeper 3.8, where the mount points are plain znodes, and requires
// the same answers. Then, on the shards themselves, each mount point
// exists exactly where its placeholder does: a refused or failed write
// left both as they were, a done one changed both.
func TestEndpointMountPointsAsZooKeeper(t *testing.T) {
	zkServer := testenv.StartZooKeeper(t, 1)
	mounts := caseMounts(mountPointCases, mountPointDirs, mountPointPrefix)
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Nodes: 1, Mounts: mounts})
	t.Cleanup(c.Stop)
	ep := c.Endpoint(c.Config.Nodes[0].Name)
	runCompatCases(t, c, []string{ep}, zkServer.Servers(), mountPointCases, mountPointPrefix)

	a := connectZK(t, c.Servers("a"), 5*time.Second)
	b := connectZK(t, c.Servers("b"), 5*time.Second)
	for _, m := range mounts {
		onB, _, err := b.Exists(m.Path)
		if assert.NoError(t, err) {
			held, _, err := a.Exists(m.Path)
			if assert.NoError(t, err) {
				assert.Equal(t, onB, held, "%s: the mount point exists on shard b = %v, its placeholder on shard a = %v", m.Path, onB, held)
			}
		}
	}
}

// recMultiRaw sends a multi on a raw connection and records each result,
// without the header zxid (the endpoint's is the root shard's).
func (d *driver) recMultiRaw(rc *rawConn, what string, ops ...proto.MultiOp) {
	resp := &proto.MultiResponse{}
	_, out := rc.do(proto.OpMulti, &proto.MultiRequest{Ops: ops}, resp)
	var res []string
	for _, r := range resp.Results {
		res = append(res, fmt.Sprintf("type=%d err=%d", r.Op, r.Err))
	}
	d.rec("%s: %s [%s]", what, out, strings.Join(res, "; "))
}

// children records a znode's children, sorted, and its cversion.
func (d *driver) children(what, path string) {
	kids, st, err := d.zk.Children(path)
	cversion := int32(-1)
	if st != nil {
		cversion = st.Cversion
	}
	d.rec("%s: children of %s %v cversion=%d %s", what, path, sorted(kids), cversion, errStr(err))
}

func (d *driver) exists(what, path string) {
	ok, _, err := d.zk.Exists(path)
	d.rec("%s: exists %s %v %s", what, path, ok, errStr(err))
}

// caseMountPointDeleteACL (item 2): deleting a mount point needs the
// delete permission on its parent, as deleting any znode does.
func caseMountPointDeleteACL(d *driver) {
	admin := d.zk
	d.rec("auth admin: %s", errStr(admin.AddAuth("digest", []byte("admin:secret"))))
	p := d.p("/p")
	acl := append(zk.DigestACL(zk.PermAll, "admin", "secret"), zk.WorldACL(zk.PermRead)...)
	_, err := admin.Create(p, nil, 0, acl)
	d.rec("create the admin's parent: %s", errStr(err))
	for _, k := range []string{"/m", "/other"} {
		_, err := admin.Create(p+k, nil, 0, world)
		d.rec("create %s: %s", k, errStr(err))
	}
	anon := d.connect("anon")
	d.rec("anon delete other: %s", errStr(anon.Delete(p+"/other", -1)))
	d.rec("anon delete the mount point: %s", errStr(anon.Delete(p+"/m", -1)))
	_, err = anon.Multi(&zk.DeleteRequest{Path: p + "/m", Version: -1})
	d.rec("anon multi deleting the mount point: %s", errStr(err))
	_, err = anon.Create(p+"/m2", nil, 0, world)
	d.rec("anon create beside it: %s", errStr(err))
	d.children("after the refusals", p)
	d.exists("after the refusals", p+"/m")

	_, err = admin.Create(p+"/m/x", nil, 0, world)
	d.rec("create under the mount point: %s", errStr(err))
	d.rec("admin delete the non-empty mount point: %s", errStr(admin.Delete(p+"/m", -1)))
	d.rec("delete its child: %s", errStr(admin.Delete(p+"/m/x", -1)))
	d.rec("admin delete at a wrong version: %s", errStr(admin.Delete(p+"/m", 3)))
	d.children("after the failures", p)
	d.rec("admin delete the mount point: %s", errStr(admin.Delete(p+"/m", 0)))
	d.children("after the delete", p)
	d.exists("after the delete", p+"/m")
	d.rec("delete it again: %s", errStr(admin.Delete(p+"/m", -1)))
	_, err = anon.Create(p+"/m", nil, 0, world)
	d.rec("anon create the mount point: %s", errStr(err))
	_, err = admin.Create(p+"/m", []byte("again"), 0, world)
	d.rec("admin create it again: %s", errStr(err))
	d.children("after the create", p)
}

// caseMountPointWithItsParent (item 11): a multi may create a mount
// point's parent and the mount point, or delete both; a mount point whose
// parent is missing is not created.
func caseMountPointWithItsParent(d *driver) {
	z, q := d.zk, d.p("/q")
	_, err := z.Create(q+"/m", nil, 0, world)
	d.rec("create the mount point without its parent: %s", errStr(err))
	_, err = z.Multi(&zk.CreateRequest{Path: q + "/m", Acl: world})
	d.rec("multi creating it without its parent: %s", errStr(err))
	rc := d.raw("raw")
	d.recMultiRaw(rc, "create the parent, the mount point and a child",
		mCreate(proto.OpCreate, q, 0), mCreate(proto.OpCreate, q+"/m", 0), mCreate(proto.OpCreate, q+"/m/x", 0),
		mSet(q+"/m", 0))
	d.children("after the create", q)
	d.children("after the create", q+"/m")
	data, st, err := z.Get(q + "/m")
	d.rec("the mount point: %q version=%d %s", data, st.Version, errStr(err))
	d.recMultiRaw(rc, "delete the child, the mount point and the parent",
		mPathVersion(proto.OpDelete, q+"/m/x", -1), mPathVersion(proto.OpDelete, q+"/m", 1), mPathVersion(proto.OpDelete, q, -1))
	d.exists("after the delete", q)
	d.exists("after the delete", q+"/m")
	d.recMultiRaw(rc, "create and delete both in one multi",
		mCreate(proto.OpCreate, q, 0), mCreate(proto.OpCreate, q+"/m", 0),
		mPathVersion(proto.OpDelete, q+"/m", -1), mPathVersion(proto.OpDelete, q, -1))
	d.exists("after create and delete", q)
}

// caseFailedMountPointCreate (item 11): a mount point's create that fails
// changes nothing, its parent's cversion included.
func caseFailedMountPointCreate(d *driver) {
	z, r := d.zk, d.p("/r")
	for _, p := range []string{r, r + "/x"} {
		_, err := z.Create(p, nil, 0, world)
		d.rec("create %s: %s", p, errStr(err))
	}
	d.children("before", r)
	rc := d.raw("raw")
	d.recMultiRaw(rc, "create the mount point and an existing znode",
		mCreate(proto.OpCreate, r+"/m", 0), mCreate(proto.OpCreate, r+"/x", 0))
	d.children("after the failed multi", r)
	d.recMultiRaw(rc, "create the mount point, then fail on its shard",
		mCreate(proto.OpCreate, r+"/m", 0), mCreate(proto.OpCreate, r+"/m/a/b", 0))
	d.children("after the second failed multi", r)
	d.exists("after the failed multis", r+"/m")
	_, err := z.Create(r+"/m", nil, 0, world)
	d.rec("create it: %s", errStr(err))
	_, err = z.Create(r+"/m", nil, 0, world)
	d.rec("create it again: %s", errStr(err))
	d.children("after the creates", r)
}

// caseMultiFailureIndexAcrossMounts (item 12): a failed multi across
// mounts names the first failing op in the client's order, whichever
// shard holds it and whichever shard coordinates.
func caseMultiFailureIndexAcrossMounts(d *driver) {
	z, s := d.zk, d.p("/s")
	for _, p := range []string{s, s + "/m", s + "/m/taken", s + "/taken"} {
		_, err := z.Create(p, nil, 0, world)
		d.rec("create %s: %s", p, errStr(err))
	}
	rc := d.raw("raw")
	d.recMultiRaw(rc, "fails on the root shard before the mounted shard",
		mCreate(proto.OpCreate, s+"/m/new", 0), mCreate(proto.OpCreate, s+"/taken", 0), mCreate(proto.OpCreate, s+"/m/taken", 0))
	d.recMultiRaw(rc, "fails on the mounted shard before the root shard",
		mCreate(proto.OpCreate, s+"/new", 0), mSet(s+"/m", 7), mPathVersion(proto.OpDelete, s+"/none", -1),
		mCreate(proto.OpCreate, s+"/m/new", 0))
	d.recMultiRaw(rc, "fails on both, late on the mounted shard",
		mPathVersion(proto.OpCheck, s+"/taken", 0), mCreate(proto.OpCreate, s+"/m/x", 0),
		mPathVersion(proto.OpDelete, s+"/none", -1), mPathVersion(proto.OpDelete, s+"/m/none", -1))
	d.recMultiRaw(rc, "fails at the mount point's placeholder",
		mCreate(proto.OpCreate, s+"/m/y", 0), mCreate(proto.OpCreate, s+"/m", 0), mCreate(proto.OpCreate, s+"/taken", 0))
	d.children("after the failed multis", s)
	d.children("after the failed multis", s+"/m")
}

// caseSequentialAtMountPoint: a sequential create at a mount point's path
// names a sibling of the mount point, which lives on the parent's shard.
func caseSequentialAtMountPoint(d *driver) {
	z, v := d.zk, d.p("/v")
	_, err := z.Create(v, nil, 0, world)
	d.rec("create %s: %s", v, errStr(err))
	p, err := z.Create(v+"/m", nil, zk.FlagSequence, world)
	d.rec("create sequential at the mount point: %s %s", p, errStr(err))
	d.children("after it", v)
	if err == nil {
		d.exists("the sequential znode", p)
	}
	d.exists("the mount point", v+"/m")
}

// caseEphemeralMountPoint: an ephemeral mount point (which no cross-shard
// transaction takes) is deleted under the same rules, and goes with its
// session.
func caseEphemeralMountPoint(d *driver) {
	admin, e := d.zk, d.p("/e")
	d.rec("auth admin: %s", errStr(admin.AddAuth("digest", []byte("admin:secret"))))
	_, err := admin.Create(e, nil, 0, append(zk.DigestACL(zk.PermAll, "admin", "secret"), zk.WorldACL(zk.PermRead)...))
	d.rec("create the admin's parent: %s", errStr(err))
	_, err = admin.Create(e+"/m", nil, zk.FlagEphemeral, world)
	d.rec("create the ephemeral mount point: %s", errStr(err))
	d.children("after the create", e)
	anon := d.connect("anon")
	d.rec("anon delete it: %s", errStr(anon.Delete(e+"/m", -1)))
	d.rec("admin delete it at a wrong version: %s", errStr(admin.Delete(e+"/m", 5)))
	d.children("after the refusals", e)
	d.exists("after the refusals", e+"/m")
	d.rec("admin delete it: %s", errStr(admin.Delete(e+"/m", 0)))
	d.children("after the delete", e)
	d.exists("after the delete", e+"/m")

	owner := d.connect("owner")
	d.rec("auth owner: %s", errStr(owner.AddAuth("digest", []byte("admin:secret"))))
	_, err = owner.Create(e+"/m", nil, zk.FlagEphemeral, world)
	d.rec("create it in another session: %s", errStr(err))
	owner.Close()
	d.waitGone(e+"/m", 20*time.Second)
	d.children("after its session closed", e)
}

package zkimport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/adler32"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// header is a file header of ZooKeeper's data directory.
func header(magic int32) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(magic))
	b = binary.BigEndian.AppendUint32(b, formatVersion)
	return binary.BigEndian.AppendUint64(b, 0)
}

// minimalSnapshot is a snapshot of the root alone.
func minimalSnapshot() []byte {
	e := proto.NewEncoder(header(snapshotMagic))
	e.Int32(0) // sessions
	e.Int32(0) // ACL map
	e.String("")
	e.Buffer(nil)
	e.Int64(openACL)
	for range 4 {
		e.Int64(0) // czxid, mzxid, ctime, mtime
	}
	e.Int32(0)
	e.Int32(0)
	e.Int32(0)
	e.Int64(0) // ephemeral owner
	e.Int64(0) // pzxid
	e.String("/")
	b := e.Bytes()
	return binary.BigEndian.AppendUint64(b, uint64(adler32.Checksum(b)))
}

// logWith is a transaction log of one create of /x.
func logWith() []byte {
	txn := proto.NewEncoder(nil)
	txn.Int64(1)  // session
	txn.Int32(1)  // cxid
	txn.Int64(1)  // zxid: the one after the snapshot's
	txn.Int64(99) // time
	txn.Int32(txnCreate)
	txn.String("/x")
	txn.Buffer([]byte("v"))
	txn.Int32(0) // ACL
	txn.Bool(false)
	txn.Int32(-1)
	rec := txn.Bytes()
	b := binary.BigEndian.AppendUint64(header(logMagic), uint64(adler32.Checksum(rec)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(rec)))
	return append(append(b, rec...), endOfRecord)
}

// writeSnapshot writes t as ZooKeeper lays out a snapshot (with no
// session): the header, the ACL map (one id per distinct ACL), every
// znode (the root as ""), "/" and the Adler-32 of what precedes it.
func writeSnapshot(t *dataTree) []byte {
	e := proto.NewEncoder(header(snapshotMagic))
	e.Int32(0) // sessions
	paths := slices.Sorted(maps.Keys(t.nodes))
	ids := map[string]int64{} // by the ACL's encoding
	var acls [][]proto.ACL
	for _, p := range paths {
		acl := t.nodes[p].acl
		if _, ok := ids[string(encodeACL(acl))]; !ok {
			ids[string(encodeACL(acl))] = int64(len(acls))
			acls = append(acls, acl)
		}
	}
	e.Int32(int32(len(acls)))
	for id, acl := range acls {
		e.Int64(int64(id))
		writeACL(e, acl)
	}
	for _, p := range paths {
		n := t.nodes[p]
		if p == "/" {
			p = ""
		}
		e.String(p)
		e.Buffer(n.data)
		e.Int64(ids[string(encodeACL(n.acl))])
		st := n.stat
		for _, v := range []int64{st.Czxid, st.Mzxid, st.Ctime, st.Mtime} {
			e.Int64(v)
		}
		e.Int32(st.Version)
		e.Int32(st.Cversion)
		e.Int32(st.Aversion)
		e.Int64(st.EphemeralOwner)
		e.Int64(st.Pzxid)
	}
	e.String("/")
	b := e.Bytes()
	return binary.BigEndian.AppendUint64(b, uint64(adler32.Checksum(b)))
}

// writeACL writes an ACL as jute does.
func writeACL(e *proto.Encoder, acl []proto.ACL) {
	e.Int32(int32(len(acl)))
	for _, a := range acl {
		e.Int32(a.Perms)
		e.String(a.ID.Scheme)
		e.String(a.ID.ID)
	}
}

// encodeACL is an ACL as jute writes it: what tells ACLs apart.
func encodeACL(acl []proto.ACL) []byte {
	e := proto.NewEncoder(nil)
	writeACL(e, acl)
	return e.Bytes()
}

// assertSameTree compares two trees as values: every znode with its data,
// ACL and stat, the index of ephemerals, the zxid and the time. A null
// ACL (a log may hold one) and an empty one are the same: the snapshot
// format has only the second.
func assertSameTree(t *testing.T, want, got *dataTree) {
	t.Helper()
	norm := func(tr *dataTree) map[string]znode {
		out := map[string]znode{}
		for p, n := range tr.nodes {
			c := *n
			if c.acl == nil {
				c.acl = []proto.ACL{}
			}
			out[p] = c
		}
		return out
	}
	assert.Equal(t, norm(want), norm(got), "znodes")
	assert.Equal(t, want.ephemerals, got.ephemerals, "ephemerals")
	assert.Equal(t, want.zxid, got.zxid, "zxid")
	assert.Equal(t, want.time, got.time, "time")
}

// assertEphemerals checks the index of ephemerals against the znodes:
// every znode a session owns is listed under it, and nothing else is.
func assertEphemerals(t *testing.T, tr *dataTree) {
	t.Helper()
	for p, n := range tr.nodes {
		if owner := n.stat.EphemeralOwner; fsm.SessionOwned(owner) {
			assert.Contains(t, tr.ephemerals[owner], p, "ephemeral %s of session %#x is not indexed", p, owner)
		}
	}
	for owner, set := range tr.ephemerals {
		for p := range set {
			n := tr.nodes[p]
			if assert.NotNil(t, n, "session %#x indexes %s, which is gone", owner, p) {
				assert.Equal(t, owner, n.stat.EphemeralOwner, "session %#x indexes %s", owner, p)
			}
		}
	}
}

// imports reports whether the import would take tr (fsm.Import accepts
// its paths and parents), without using tr up.
func imports(tr *dataTree) bool {
	cp := &dataTree{nodes: maps.Clone(tr.nodes), zxid: tr.zxid, time: tr.time}
	_, _, err := cp.state()
	return err == nil
}

// FuzzReadSnapshot: any bytes read as a snapshot give a tree or an error,
// never a panic; a tree read is a round trip: written again by
// writeSnapshot, it reads back the same, and its index of ephemerals
// agrees with its znodes.
func FuzzReadSnapshot(f *testing.F) {
	f.Add(minimalSnapshot())
	f.Add(header(snapshotMagic))
	f.Add(writeSnapshot(sample()))
	f.Fuzz(func(t *testing.T, b []byte) {
		tree, err := readSnapshot(bytes.NewReader(b), 7)
		if err != nil {
			return
		}
		assertEphemerals(t, tree)
		back, err := readSnapshot(bytes.NewReader(writeSnapshot(tree)), 7)
		require.NoError(t, err, "a tree read, written again")
		assertSameTree(t, tree, back)
	})
}

// FuzzReplayLog: any bytes replayed as a log onto a tree apply what they
// can or stop with an error, never a panic. No writer of logs exists to
// round-trip through, so it checks instead: a replay that stopped between
// transactions (at the end, at a torn record, at a gap) leaves a tree
// that the same log replayed again does not change (every transaction
// is at or below its zxid now: ZooKeeper's rule for a log that overlaps
// the snapshot); a replay that applied nothing left the snapshot's tree;
// the index of ephemerals agrees with the znodes; and a tree the import
// takes round-trips through the snapshot format (writeSnapshot).
func FuzzReplayLog(f *testing.F) {
	f.Add(logWith())
	f.Add(header(logMagic))
	fresh := func(t *testing.T) *dataTree {
		tree, err := readSnapshot(bytes.NewReader(minimalSnapshot()), 0)
		require.NoError(t, err)
		return tree
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tree := fresh(t)
		n, err := replayLog(bytes.NewReader(b), tree)
		var gap *GapError
		if err != nil && !errors.Is(err, errTornTail) && !errors.As(err, &gap) {
			return // a transaction that does not decode: the import stops there
		}
		assertEphemerals(t, tree)
		if n == 0 {
			assertSameTree(t, fresh(t), tree)
		}
		before := clone(tree)
		again, err2 := replayLog(bytes.NewReader(b), tree)
		assert.Zero(t, again, "transactions applied again")
		assert.Equal(t, fmt.Sprint(err), fmt.Sprint(err2), "the same log replayed again")
		assertSameTree(t, before, tree)
		if imports(tree) {
			back, err := readSnapshot(bytes.NewReader(writeSnapshot(tree)), tree.zxid)
			require.NoError(t, err, "a replayed tree, written as a snapshot")
			assertSameTree(t, tree, back)
		}
	})
}

// clone copies a tree deeply.
func clone(tr *dataTree) *dataTree {
	out := &dataTree{nodes: map[string]*znode{}, ephemerals: map[int64]map[string]struct{}{}, zxid: tr.zxid, time: tr.time, gaps: tr.gaps}
	for p, n := range tr.nodes {
		c := *n
		c.data, c.acl = slices.Clone(n.data), slices.Clone(n.acl)
		out.nodes[p] = &c
	}
	for s, set := range tr.ephemerals {
		out.ephemerals[s] = maps.Clone(set)
	}
	return out
}

// sample is a tree with what a snapshot can hold: nesting, data null,
// empty and not, ACLs shared and not, an ephemeral, a container.
func sample() *dataTree {
	tr := newDataTree()
	world := proto.WorldACL(proto.PermAll)
	digest := []proto.ACL{{Perms: proto.PermRead, ID: proto.ID{Scheme: "digest", ID: "u:x"}}}
	for _, n := range []struct {
		path  string
		data  []byte
		acl   []proto.ACL
		owner int64
	}{
		{"/", nil, world, 0}, {"/a", []byte("v"), world, 0}, {"/a/b", []byte{}, digest, 0},
		{"/a/eph", nil, world, 0x5e}, {"/c", []byte("x"), digest, fsm.ContainerOwner},
	} {
		tr.put(n.path, &znode{data: n.data, acl: n.acl, stat: proto.Stat{Czxid: 3, Mzxid: 4, Ctime: 5, Mtime: 6, Version: 1,
			Cversion: 2, Aversion: 3, EphemeralOwner: n.owner, Pzxid: 4}})
	}
	return tr
}

// TestSnapshotWriterReadsBack: a tree written by writeSnapshot reads back
// as that tree, every field of it (the fuzz round trip starts from what
// readSnapshot made, so it cannot see a field readSnapshot drops).
func TestSnapshotWriterReadsBack(t *testing.T) {
	want := sample()
	got, err := readSnapshot(bytes.NewReader(writeSnapshot(want)), 0)
	require.NoError(t, err)
	want.time = 6 // the newest ctime or mtime
	assertSameTree(t, want, got)
}

func TestSeedsReadBack(t *testing.T) {
	tree, err := readSnapshot(bytes.NewReader(minimalSnapshot()), 0)
	if err != nil {
		t.Fatal(err)
	}
	n, err := replayLog(bytes.NewReader(logWith()), tree)
	if err != nil || n != 1 || tree.nodes["/x"] == nil {
		t.Fatalf("replayed %d, %v; /x %v", n, err, tree.nodes["/x"])
	}
}

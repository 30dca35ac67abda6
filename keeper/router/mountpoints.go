package router

import (
	"fmt"
	"slices"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// A mount point lives on its shard and has a placeholder of the same name
// on the shard that holds its parent (Table.Holder), so that getChildren
// of the parent lists it. A write that creates or deletes a mount point
// runs as one cross-shard transaction with its placeholder's create or
// delete: the holder shard checks what ZooKeeper checks of the parent
// (that it exists, the client's create or delete permission on it, that
// it is not ephemeral) where the parent's real ACL is, and both change or
// neither does. An ephemeral mount point cannot be in a transaction (its
// session could end between prepare and commit): mountPointAlone writes
// one alone, and a multi that creates or deletes one is refused
// (BadArguments, from the mount's shard's prepare).

// xop is one op of a write as the shards run it: a client's op, or the
// op on a mount point's placeholder that a client's op brings along.
type xop struct {
	shard string
	op    proto.MultiOp
	// client is the index of the client's op it belongs to.
	client int
	// placeholder marks a placeholder's op: its result is not the
	// client's, and it comes before its mount point's op, as ZooKeeper
	// checks the parent before the node.
	placeholder bool
}

// plan places a write's ops on their shards, a mount point's create or
// delete with its placeholder's.
func (t *Table) plan(ops []proto.MultiOp) []xop {
	xs := make([]xop, 0, len(ops))
	for i, op := range ops {
		if ph, ok := t.placeholderOp(op); ok {
			xs = append(xs, xop{shard: t.Holder(proto.Paths(op.Req)[0]), op: ph, client: i, placeholder: true})
		}
		xs = append(xs, xop{shard: t.OpShard(op.Op, op.Req), op: op, client: i})
	}
	return xs
}

// placeholderOp returns the op on a mount point's placeholder that op
// brings along, if op creates or deletes a mount point: the create of a
// persistent znode of the mount point's ACL, or a delete of any version.
func (t *Table) placeholderOp(op proto.MultiOp) (proto.MultiOp, bool) {
	path := proto.Paths(op.Req)[0]
	if !t.IsMountPoint(path) || t.Holder(path) == t.Shard(path) {
		return proto.MultiOp{}, false
	}
	if op.Op == proto.OpDelete || op.Op == proto.OpDeleteContainer {
		return proto.MultiOp{Op: proto.OpDelete, Req: &proto.PathVersionRequest{Path: path, Version: -1}}, true
	}
	cr := createOf(op.Req)
	if cr == nil || !isCreate(op.Op) || cr.Flags&proto.FlagSequential != 0 {
		return proto.MultiOp{}, false
	}
	if op.Op == proto.OpCreateIfNotExists { // and its placeholder, if not there
		return proto.MultiOp{Op: proto.OpCreateIfNotExists, Req: &proto.CreateRequest{Path: path, ACL: cr.ACL}}, true
	}
	return proto.MultiOp{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: path, ACL: cr.ACL}}, true
}

// createOf returns a create request's CreateRequest, nil for another.
func createOf(req proto.Record) *proto.CreateRequest {
	switch r := req.(type) {
	case *proto.CreateRequest:
		return r
	case *proto.CreateTTLRequest:
		return &r.CreateRequest
	}
	return nil
}

// OpShard returns the shard a request's znode lives on: its path's
// (Shard), except for a sequential create at a mount point's path, whose
// znode is the mount point's sibling (the path and a counter) on the
// parent's shard.
func (t *Table) OpShard(op proto.OpCode, req proto.Record) string {
	path := proto.Paths(req)[0]
	if cr := createOf(req); cr != nil && isCreate(op) && cr.Flags&proto.FlagSequential != 0 && t.IsMountPoint(path) {
		return t.Holder(path)
	}
	return t.Shard(path)
}

// inTransaction reports whether a mount point's create or delete runs as
// a transaction, which runs it as a multi's op: a delete, a create of a
// persistent znode, or a createTTL in a TTL mode (which fails with
// ZooKeeper's code, TTL nodes being off, and so changes nothing; alone,
// its placeholder's create and delete moved the parent's cversion). Not an
// ephemeral (no transaction takes one), nor what a multi's op makes
// otherwise than the request alone (in a multi the flags pick a create's
// kind). Not a container either, though a transaction takes one: its
// answer's stat would be the prepare's (zxids included), which a read
// after it contradicts; alone, the mount point's shard answers.
func inTransaction(op proto.OpCode, req proto.Record) bool {
	switch op {
	case proto.OpDelete:
		return true
	case proto.OpCreate, proto.OpCreate2:
		return req.(*proto.CreateRequest).Flags == 0
	case proto.OpCreateTTL:
		return req.(*proto.CreateTTLRequest).Flags == proto.ModePersistentTTL
	}
	return false
}

// mountPointWrite creates or deletes a mount point with its placeholder,
// as one transaction (or, for what a transaction cannot take, as
// mountPointAlone does), and answers as ZooKeeper's create or delete.
func (f *front) mountPointWrite(h proto.RequestHeader, body []byte, req proto.Record) error {
	if !inTransaction(h.OpCode, req) {
		return f.mountPointAlone(h, body, req)
	}
	if err := f.await(""); err != nil {
		return err
	}
	defer f.done()
	resp, code, err := f.writeAcross(f.r.table.plan([]proto.MultiOp{{Op: h.OpCode, Req: req}}), 1)
	if err != nil {
		return err
	}
	if code == proto.ErrOK && resp.Results[0].Op == proto.OpError {
		code = resp.Results[0].Err
	}
	if code == proto.ErrBadArguments && h.OpCode == proto.OpDelete {
		// The mount point is ephemeral, which a transaction may not delete.
		return f.deleteEphemeralMountPoint(h, body, proto.Paths(req)[0])
	}
	if code != proto.ErrOK {
		f.respond(h.Xid, code, nil)
		return nil
	}
	if h.OpCode == proto.OpCreate2 {
		return f.answerCreate2(h.Xid, req.(*proto.CreateRequest))
	}
	f.respond(h.Xid, proto.ErrOK, resp.Results[0].Resp)
	return nil
}

// answerCreate2 answers a create2 of a persistent mount point that a
// transaction made. In a multi a create answers with its path alone, and
// the client's create2 wants the new znode's stat (before, it got the path
// alone, and could not read the reply): its czxid and ctime are read back
// on the mount point's shard (the commit's, which every later read shows;
// the read waits for the commit's locks), the rest is what any new
// persistent znode's stat is, whatever another client did to it since.
// If it is gone again already, the connection ends: the client finds out
// by reading, as after a connection loss. Called within an await.
func (f *front) answerCreate2(xid int32, cr *proto.CreateRequest) error {
	var st proto.StatResponse
	b, err := f.backend(f.r.table.Shard(cr.Path))
	if err == nil {
		err = b.callOK(proto.OpExists, &proto.PathWatchRequest{Path: cr.Path}, &st)
	}
	if err != nil {
		return fmt.Errorf("router: the stat of mount point %s after its create2: %w", cr.Path, err)
	}
	z, t := st.Stat.Czxid, st.Stat.Ctime
	f.respond(xid, proto.ErrOK, &proto.Create2Response{Path: cr.Path,
		Stat: proto.Stat{Czxid: z, Mzxid: z, Pzxid: z, Ctime: t, Mtime: t, DataLength: int32(len(cr.Data))}})
	return nil
}

// neverVersion is a version no znode has: a check of it always fails.
const neverVersion = -2

// deleteEphemeralMountPoint deletes an ephemeral mount point, which no
// transaction takes (its session may end between prepare and commit):
// the placeholder's delete is tried first in a multi that a check of
// neverVersion then fails, so the holder shard answers for the parent
// (missing, or no delete permission) and changes nothing; then the mount
// point is deleted on its shard and, if it went, its placeholder. (A
// change of the parent's ACL in between is not seen.) Called within an
// await.
func (f *front) deleteEphemeralMountPoint(h proto.RequestHeader, body []byte, path string) error {
	holder := f.r.table.Holder(path)
	dry := &proto.MultiRequest{Ops: []proto.MultiOp{
		{Op: proto.OpDelete, Req: &proto.PathVersionRequest{Path: path, Version: -1}},
		{Op: proto.OpCheck, Req: &proto.PathVersionRequest{Path: "/", Version: neverVersion}},
	}}
	resp, code, err := f.callMulti(holder, proto.OpMulti, proto.Marshal(dry))
	if err != nil {
		return err
	}
	if code == proto.ErrOK && len(resp.Results) > 0 && resp.Results[0].Err != proto.ErrOK {
		code = resp.Results[0].Err
	}
	if code != proto.ErrOK {
		f.respond(h.Xid, code, nil)
		return nil
	}
	return f.mountPointSteps(h, body, path, false)
}

// mountPointAlone creates a mount point that inTransaction leaves out
// (ephemeral, container, or a create whose flags a multi reads
// otherwise): it makes the placeholder first (which checks that the
// parent exists, and that the client may create under it), and takes it
// back if the create fails. Unlike ZooKeeper, a create
// that fails on the mount point's shard then moves the parent's cversion
// by two. A deleteContainer (no client's request: ZooKeeper's own)
// deletes the mount point, then its placeholder.
func (f *front) mountPointAlone(h proto.RequestHeader, body []byte, req proto.Record) error {
	if err := f.await(""); err != nil {
		return err
	}
	defer f.done()
	made := false
	if isCreate(h.OpCode) {
		var code proto.Code
		if made, code = f.holdPlace(req); code != proto.ErrOK {
			f.respond(h.Xid, code, nil)
			return nil
		}
	}
	return f.mountPointSteps(h, body, proto.Paths(req)[0], made)
}

// mountPointSteps sends a mount point's create or delete to its shard,
// deletes the placeholder if the delete was done, or if the create failed
// and made it (made), and answers the client.
func (f *front) mountPointSteps(h proto.RequestHeader, body []byte, path string, made bool) error {
	shard := f.r.table.Shard(path)
	rh, rbody, err := f.callShard(shard, h.OpCode, body)
	if err != nil {
		return err
	}
	if rh.Err != proto.ErrOK && made || rh.Err == proto.ErrOK && !isCreate(h.OpCode) {
		f.dropPlaces([]string{path})
	}
	f.reply(h.Xid, shard, rh, rbody)
	return nil
}

// holdPlace makes the placeholder of the mount point a create request
// names (ephemeral if the create is): made reports whether it is new, code
// why it could not be made (ErrConnectionLoss if the holder shard could not
// be asked: the client's connection ends).
func (f *front) holdPlace(req proto.Record) (made bool, code proto.Code) {
	cr := createOf(req)
	flags := int32(0)
	if cr.Flags == proto.FlagEphemeral {
		flags = proto.FlagEphemeral
	}
	b, err := f.backend(f.r.table.Holder(cr.Path))
	if err != nil {
		return false, proto.ErrConnectionLoss
	}
	h, _, err := b.call(proto.OpCreate, proto.Marshal(&proto.CreateRequest{Path: cr.Path, ACL: cr.ACL, Flags: flags}))
	switch {
	case err != nil:
		return false, proto.ErrConnectionLoss
	case h.Err == proto.ErrNodeExists:
		return false, proto.ErrOK
	}
	return h.Err == proto.ErrOK, h.Err
}

// dropPlaces deletes the placeholders of mount points.
func (f *front) dropPlaces(paths []string) {
	for _, p := range paths {
		if b, err := f.backend(f.r.table.Holder(p)); err == nil {
			b.call(proto.OpDelete, proto.Marshal(&proto.PathVersionRequest{Path: p, Version: -1}))
		}
	}
}

// spans reports whether a write's ops live on more than one shard.
func spans(xs []xop) bool {
	return slices.ContainsFunc(xs, func(x xop) bool { return x.shard != xs[0].shard })
}

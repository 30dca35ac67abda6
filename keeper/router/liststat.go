package router

import (
	"slices"
	"strings"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// A list with stat and data (LIST_WITH_STAT_AND_DATA) of a node with a
// mount point among its children is answered by the node's shard, where
// the mount point is a placeholder: the endpoint puts the mounted node's
// own stat and data in its place, read from the mount's shard (a getData,
// with that node's ACL and locks).

// mountedChildren returns the mount points that are children of path.
func (t *Table) mountedChildren(path string) []string {
	var out []string
	for _, mp := range t.MountPoints() {
		if mp != "/" && parent(mp) == path {
			out = append(out, mp)
		}
	}
	return out
}

// listsMountedStats reports whether req is a list with stat and data that
// shows the stat or data of a mount point.
func (t *Table) listsMountedStats(req proto.Record) bool {
	r, ok := req.(*proto.ListWithStatsAndDataRequest)
	return ok && (r.WithStat || r.WithData) && len(t.mountedChildren(r.Path)) > 0
}

// listWithMounts answers a list with stat and data that shows mount
// points: the parent's shard's answer, with the mount points' stats and
// data in place of their placeholders'.
func (f *front) listWithMounts(h proto.RequestHeader, r *proto.ListWithStatsAndDataRequest, body []byte) error {
	if err := f.await(""); err != nil {
		return err
	}
	defer f.done()
	f.r.metrics.requests.WithLabelValues("several").Inc()
	b, err := f.backend(f.r.table.Shard(r.Path))
	if err != nil {
		return err
	}
	rh, rbody, err := b.call(h.OpCode, body)
	if err != nil {
		return err
	}
	if rh.Err != proto.ErrOK {
		f.respond(h.Xid, rh.Err, nil)
		return nil
	}
	var resp proto.ListWithStatsAndDataResponse
	if err := proto.Unmarshal(rbody, &resp); err != nil {
		return err
	}
	code, err := f.fillMounted(r, &resp)
	if err != nil {
		return err
	}
	f.respond(h.Xid, code, &resp)
	return nil
}

// fillMounted puts each listed mount point's stat and data, as its shard
// reads them for the session, in resp. A code other than ErrOK is the
// answer (the mount point's ErrNoAuth or ErrLocked); a mount point gone
// meanwhile is left out.
func (f *front) fillMounted(r *proto.ListWithStatsAndDataRequest, resp *proto.ListWithStatsAndDataResponse) (proto.Code, error) {
	prefix := strings.TrimSuffix(r.Path, "/") + "/"
	for _, mp := range f.r.table.mountedChildren(r.Path) {
		i := slices.Index(resp.Children, strings.TrimPrefix(mp, prefix))
		if i < 0 {
			continue
		}
		b, err := f.backend(f.r.table.Shard(mp))
		if err != nil {
			return 0, err
		}
		rh, body, err := b.call(proto.OpGetData, proto.Marshal(&proto.PathWatchRequest{Path: mp}))
		if err != nil {
			return 0, err
		}
		switch rh.Err {
		case proto.ErrOK:
		case proto.ErrNoNode:
			resp.Children = slices.Delete(resp.Children, i, i+1)
			if r.WithStat && i < len(resp.Stats) {
				resp.Stats = slices.Delete(resp.Stats, i, i+1)
			}
			if r.WithData && i < len(resp.Data) {
				resp.Data = slices.Delete(resp.Data, i, i+1)
			}
			continue
		default:
			return rh.Err, nil
		}
		var got proto.GetDataResponse
		if err := proto.Unmarshal(body, &got); err != nil {
			return 0, err
		}
		if r.WithStat && i < len(resp.Stats) {
			resp.Stats[i] = got.Stat
		}
		if r.WithData && i < len(resp.Data) {
			resp.Data[i] = got.Data
		}
	}
	return proto.ErrOK, nil
}

// fillMountedReads does fillMounted for each list with stat and data of a
// multiRead's ops that shows mount points; one the mount point refuses
// fails on its own, as a multiRead's read does.
func (f *front) fillMountedReads(ops []proto.MultiOp, results []proto.MultiResult) error {
	for i, op := range ops {
		resp, ok := results[i].Resp.(*proto.ListWithStatsAndDataResponse)
		if !ok || !f.r.table.listsMountedStats(op.Req) {
			continue
		}
		code, err := f.fillMounted(op.Req.(*proto.ListWithStatsAndDataRequest), resp)
		if err != nil {
			return err
		}
		if code != proto.ErrOK {
			results[i] = proto.MultiResult{Op: proto.OpError, Err: code}
		}
	}
	return nil
}

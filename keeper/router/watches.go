package router

import (
	"slices"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// WatchShards returns the shards a watch on path lives on: the one that
// holds path, and for a recursive watch also each shard mounted below
// path, whose changes the watch covers too.
func (t *Table) WatchShards(path string, recursive bool) []string {
	shards := []string{t.Shard(path)}
	if !recursive {
		return shards
	}
	for _, m := range t.mounts {
		below := m.Path != path && (path == "/" || under(m.Path, path))
		if below && !slices.Contains(shards, m.Shard) {
			shards = append(shards, m.Shard)
		}
	}
	return shards
}

// notifyFrom passes a shard's watch notification (a frame's body) to the
// client, unless the event is not the client's to hear from that shard:
// one on a path another shard holds (a mount point's placeholder, a
// mounted shard's scaffolding, which a recursive watch above a mount meets
// on both shards: the client hears of each change once) or on the
// endpoint's own session records.
func (f *front) notifyFrom(shard string, body []byte) {
	d := proto.NewDecoder(body)
	var h proto.ReplyHeader
	var ev proto.WatcherEvent
	h.Decode(d)
	ev.Decode(d)
	if d.Err() == nil && (f.r.table.Shard(ev.Path) != shard || proto.UnderEndpointSessions(ev.Path)) {
		return
	}
	f.notify(body)
}

// spansShards reports whether a watch request goes to every shard its
// watch may live on (watchRequest) rather than to its path's shard: a
// recursive addWatch, and any removeWatches or checkWatches (the watch to
// remove may be recursive).
func spansShards(req proto.Record) bool {
	switch r := req.(type) {
	case *proto.AddWatchRequest:
		return r.Mode == proto.AddWatchPersistentRecursive
	case *proto.WatchesRequest:
		return true
	}
	return false
}

// watchRequest sends a watch request to every shard of its path's
// recursive watch (Table.WatchShards). A recursive addWatch is answered
// by the path's shard once every shard took it; a removeWatches or
// checkWatches is ok if any shard held such a watch, else the path's
// shard's answer.
func (f *front) watchRequest(h proto.RequestHeader, path string, body []byte) error {
	if err := f.await(""); err != nil {
		return err
	}
	defer f.done()
	var first proto.ReplyHeader
	var firstBody []byte
	found := false
	for i, shard := range f.r.table.WatchShards(path, true) {
		if i > 0 && h.OpCode != proto.OpAddWatch && f.backendOpen(shard) == nil {
			continue // the session has no connection there, so no watch
		}
		rh, rbody, err := f.callShard(shard, h.OpCode, body)
		if err != nil {
			return err
		}
		if i == 0 {
			first, firstBody = rh, rbody
		}
		found = found || rh.Err == proto.ErrOK
	}
	if h.OpCode != proto.OpAddWatch && found && first.Err != proto.ErrOK {
		f.respond(h.Xid, proto.ErrOK, nil)
		return nil
	}
	f.reply(h.Xid, f.r.table.Shard(path), first, firstBody)
	return nil
}

package proto

import "strings"

// Paths returns every znode path a request names, in the order it names
// them: one for most requests, each op's for a multi or a cross-shard
// transaction, every list of a setWatches; none for requests without a
// path.
func Paths(req Record) []string {
	if p, ok := onePath(req); ok {
		return []string{p}
	}
	switch r := req.(type) {
	case *MultiRequest:
		paths := make([]string, 0, len(r.Ops))
		for _, op := range r.Ops {
			paths = append(paths, Paths(op.Req)...)
		}
		return paths
	case *XTransactionRequest:
		var paths []string
		for _, sh := range r.Shards {
			paths = append(paths, Paths(&sh.Ops)...)
		}
		return paths
	case *SetWatchesRequest:
		var paths []string
		for _, l := range [][]string{r.DataWatches, r.ExistWatches, r.ChildWatches, r.PersistentWatches, r.PersistentRecursiveWatches} {
			paths = append(paths, l...)
		}
		return paths
	}
	return nil
}

// onePath returns the path of a request that names exactly one.
func onePath(req Record) (string, bool) {
	switch r := req.(type) {
	case *CreateRequest:
		return r.Path, true
	case *CreateTTLRequest:
		return r.Path, true
	case *PathVersionRequest:
		return r.Path, true
	case *CheckStatRequest:
		return r.Path, true
	case *PathWatchRequest:
		return r.Path, true
	case *FilteredListRequest:
		return r.Path, true
	case *ListWithStatsAndDataRequest:
		return r.Path, true
	case *RemoveRecursiveRequest:
		return r.Path, true
	case *PathRequest:
		return r.Path, true
	case *SetDataRequest:
		return r.Path, true
	case *SetACLRequest:
		return r.Path, true
	case *AddWatchRequest:
		return r.Path, true
	case *WatchesRequest:
		return r.Path, true
	}
	return "", false
}

// EndpointSessions is the directory, on a node cluster's root shard, where
// a node's client endpoint keeps each front session's sessions on the
// other shards (an ephemeral znode of the front session). It holds session
// passwords, so it is out of every client's reach: a member refuses any
// request that names it, except on the connections its own node's
// endpoint opens.
const EndpointSessions = "/xkeeper-sessions"

// UnderEndpointSessions reports whether path is EndpointSessions or below it.
func UnderEndpointSessions(path string) bool {
	return path == EndpointSessions || strings.HasPrefix(path, EndpointSessions+"/")
}

// NamesEndpointSessions reports whether a request names a path under
// EndpointSessions.
func NamesEndpointSessions(req Record) bool {
	if p, ok := onePath(req); ok {
		return UnderEndpointSessions(p)
	}
	for _, p := range Paths(req) {
		if UnderEndpointSessions(p) {
			return true
		}
	}
	return false
}

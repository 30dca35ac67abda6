package proto

import "strings"

// Paths returns every znode path a request names, in the order it names
// them: one for most requests, each op's for a multi, every list of a
// setWatches; none for requests without a path.
func Paths(req Record) []string {
	switch r := req.(type) {
	case *CreateRequest:
		return []string{r.Path}
	case *CreateTTLRequest:
		return []string{r.Path}
	case *PathVersionRequest:
		return []string{r.Path}
	case *PathWatchRequest:
		return []string{r.Path}
	case *PathRequest:
		return []string{r.Path}
	case *SetDataRequest:
		return []string{r.Path}
	case *SetACLRequest:
		return []string{r.Path}
	case *AddWatchRequest:
		return []string{r.Path}
	case *MultiRequest:
		paths := make([]string, 0, len(r.Ops))
		for _, op := range r.Ops {
			paths = append(paths, Paths(op.Req)...)
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
	for _, p := range Paths(req) {
		if UnderEndpointSessions(p) {
			return true
		}
	}
	return false
}

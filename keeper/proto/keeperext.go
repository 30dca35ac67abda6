package proto

import "strings"

// ClickHouse Keeper's own opcodes (Coordination::OpNum, 500 and up). A
// ClickHouse client sends them only where the keeper's
// /keeper/feature_flags says it may (see Features).
const (
	OpFilteredList                 OpCode = 500 // getChildren2 of the children of one kind
	OpCheckNotExists               OpCode = 501 // check that a node, or that version of it, is absent
	OpCreateIfNotExists            OpCode = 502 // create, or nothing (ZOK) if the node is there
	OpRemoveRecursive              OpCode = 503 // delete a subtree of at most a given size
	OpCheckStat                    OpCode = 504 // check against stat fields; not implemented
	OpTryRemove                    OpCode = 505 // delete, or nothing (ZOK) if it cannot be deleted
	OpFilteredListWithStatsAndData OpCode = 506 // not implemented
	OpListRecursive                OpCode = 507 // not implemented
)

// Kinds of children a filteredList asks for (ClickHouse's ListRequestType).
const (
	ListAll            uint8 = 0
	ListPersistentOnly uint8 = 1
	ListEphemeralOnly  uint8 = 2
)

// FilteredListRequest is a filteredList: getChildren2 of the children of
// one kind. Its reply is a ChildrenResponse with the parent's stat.
type FilteredListRequest struct {
	PathWatchRequest
	Type uint8 // ListAll, ListPersistentOnly or ListEphemeralOnly
}

// FilteredList returns the filteredList of path's children of kind typ.
func FilteredList(path string, watch bool, typ uint8) *FilteredListRequest {
	return &FilteredListRequest{PathWatchRequest{Path: path, Watch: watch}, typ}
}

// Encode implements Record.
func (r *FilteredListRequest) Encode(e *Encoder) { r.PathWatchRequest.Encode(e); e.Uint8(r.Type) }

// Decode implements Record.
func (r *FilteredListRequest) Decode(d *Decoder) { r.PathWatchRequest.Decode(d); r.Type = d.Uint8() }

// RemoveRecursiveRequest deletes a node and everything below it, if the
// subtree holds at most Limit nodes (the node itself counted); its reply
// has no body.
type RemoveRecursiveRequest struct {
	Path  string
	Limit uint32
}

// Encode implements Record.
func (r *RemoveRecursiveRequest) Encode(e *Encoder) { e.String(r.Path); e.Int32(int32(r.Limit)) }

// Decode implements Record.
func (r *RemoveRecursiveRequest) Decode(d *Decoder) { r.Path = d.String(); r.Limit = uint32(d.Int32()) }

// KeeperSystemPath is where ClickHouse Keeper serves its system nodes,
// read-only: KeeperAPIVersionPath, KeeperFeatureFlagsPath and, where the
// member has one, KeeperAvailabilityZonePath.
const (
	KeeperSystemPath           = "/keeper"
	KeeperAPIVersionPath       = KeeperSystemPath + "/api_version"
	KeeperFeatureFlagsPath     = KeeperSystemPath + "/feature_flags"
	KeeperAvailabilityZonePath = KeeperSystemPath + "/availability_zone"
)

// UnderKeeperSystem reports whether path is KeeperSystemPath or below it,
// where ClickHouse Keeper refuses every write with ErrBadArguments.
func UnderKeeperSystem(path string) bool {
	return path == KeeperSystemPath || strings.HasPrefix(path, KeeperSystemPath+"/")
}

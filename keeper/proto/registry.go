package proto

// NewRequest returns an empty request record for a top-level opcode, or
// nil for an opcode xkeeper does not know. New request types (such as the
// cross-shard opcodes) are added here.
func NewRequest(op OpCode) Record {
	switch op {
	case OpCreate, OpCreate2, OpCreateContainer, OpCreateIfNotExists:
		return &CreateRequest{}
	case OpCreateTTL:
		return &CreateTTLRequest{}
	case OpDelete, OpCheck, OpCheckNotExists, OpTryRemove:
		return &PathVersionRequest{}
	case OpCheckStat:
		return &CheckStatRequest{}
	case OpExists, OpGetData, OpGetChildren, OpGetChildren2:
		return &PathWatchRequest{}
	case OpFilteredList:
		return &FilteredListRequest{}
	case OpFilteredListWithStatsAndData:
		return &ListWithStatsAndDataRequest{}
	case OpRemoveRecursive:
		return &RemoveRecursiveRequest{}
	case OpSetData:
		return &SetDataRequest{}
	case OpGetACL, OpSync, OpGetAllChildrenNumber, OpGetEphemerals, OpDeleteContainer:
		return &PathRequest{}
	case OpSetACL:
		return &SetACLRequest{}
	case OpMulti, OpMultiRead:
		return &MultiRequest{}
	case OpAuth:
		return &AuthPacket{}
	case OpSetWatches:
		return &SetWatchesRequest{}
	case OpSetWatches2:
		return &SetWatchesRequest{V2: true}
	case OpAddWatch:
		return &AddWatchRequest{}
	case OpRemoveWatches, OpCheckWatches:
		return &WatchesRequest{}
	case OpPing, OpCloseSession, OpWhoAmI, OpXList:
		return Empty{}
	case OpXTransaction:
		return &XTransactionRequest{}
	case OpXPrepare:
		return &XPrepareRequest{}
	case OpXCommit, OpXFail, OpXCommitDelete, OpXDelete, OpXOutcome:
		return &XIDRequest{}
	case OpXStatus:
		return &XStatusRequest{}
	}
	return nil
}

// IsWrite reports whether op changes state and therefore goes through the
// replicated log.
func IsWrite(op OpCode) bool {
	switch op {
	case OpCreate, OpCreate2, OpCreateContainer, OpCreateTTL, OpDelete, OpDeleteContainer,
		OpSetData, OpSetACL, OpMulti, OpCloseSession, OpSync, OpCheck,
		OpCheckNotExists, OpCreateIfNotExists, OpRemoveRecursive, OpTryRemove, OpCheckStat,
		OpXPrepare, OpXCommit, OpXFail, OpXCommitDelete, OpXDelete, OpXStatus:
		return true
	}
	return false
}

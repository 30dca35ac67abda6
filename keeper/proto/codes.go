package proto

import "fmt"

// OpCode is a ZooKeeper request type (ZooDefs.OpCode).
type OpCode int32

// ZooKeeper 3.8 opcodes.
const (
	OpNotification         OpCode = 0
	OpCreate               OpCode = 1
	OpDelete               OpCode = 2
	OpExists               OpCode = 3
	OpGetData              OpCode = 4
	OpSetData              OpCode = 5
	OpGetACL               OpCode = 6
	OpSetACL               OpCode = 7
	OpGetChildren          OpCode = 8
	OpSync                 OpCode = 9
	OpPing                 OpCode = 11
	OpGetChildren2         OpCode = 12
	OpCheck                OpCode = 13
	OpMulti                OpCode = 14
	OpCreate2              OpCode = 15
	OpReconfig             OpCode = 16
	OpCheckWatches         OpCode = 17
	OpRemoveWatches        OpCode = 18
	OpCreateContainer      OpCode = 19
	OpDeleteContainer      OpCode = 20
	OpCreateTTL            OpCode = 21
	OpMultiRead            OpCode = 22
	OpAuth                 OpCode = 100
	OpSetWatches           OpCode = 101
	OpSASL                 OpCode = 102
	OpGetEphemerals        OpCode = 103
	OpGetAllChildrenNumber OpCode = 104
	OpSetWatches2          OpCode = 105
	OpAddWatch             OpCode = 106
	OpWhoAmI               OpCode = 107
	OpCreateSession        OpCode = -10
	OpCloseSession         OpCode = -11
	OpError                OpCode = -1
)

var opNames = map[OpCode]string{
	OpNotification: "notification", OpCreate: "create", OpDelete: "delete", OpExists: "exists",
	OpGetData: "getData", OpSetData: "setData", OpGetACL: "getACL", OpSetACL: "setACL",
	OpGetChildren: "getChildren", OpSync: "sync", OpPing: "ping", OpGetChildren2: "getChildren2",
	OpCheck: "check", OpMulti: "multi", OpCreate2: "create2", OpReconfig: "reconfig",
	OpCheckWatches: "checkWatches", OpRemoveWatches: "removeWatches",
	OpCreateContainer: "createContainer", OpDeleteContainer: "deleteContainer",
	OpFilteredList: "filteredList", OpCheckNotExists: "checkNotExists", OpCreateIfNotExists: "createIfNotExists",
	OpRemoveRecursive: "removeRecursive", OpCheckStat: "checkStat", OpTryRemove: "tryRemove",
	OpFilteredListWithStatsAndData: "filteredListWithStatsAndData", OpListRecursive: "listRecursive",
	OpCreateTTL: "createTTL", OpMultiRead: "multiRead", OpAuth: "auth", OpSetWatches: "setWatches",
	OpSASL: "sasl", OpGetEphemerals: "getEphemerals", OpGetAllChildrenNumber: "getAllChildrenNumber",
	OpSetWatches2: "setWatches2", OpAddWatch: "addWatch", OpWhoAmI: "whoAmI",
	OpCreateSession: "createSession", OpCloseSession: "closeSession", OpError: "error",
}

func (o OpCode) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return fmt.Sprintf("op(%d)", int32(o))
}

// Code is a ZooKeeper error code (KeeperException.Code). It implements error.
type Code int32

// ZooKeeper 3.8 error codes.
const (
	ErrOK                      Code = 0
	ErrSystemError             Code = -1
	ErrRuntimeInconsistency    Code = -2
	ErrDataInconsistency       Code = -3
	ErrConnectionLoss          Code = -4
	ErrMarshallingError        Code = -5
	ErrUnimplemented           Code = -6
	ErrOperationTimeout        Code = -7
	ErrBadArguments            Code = -8
	ErrUnknownSession          Code = -12
	ErrNewConfigNoQuorum       Code = -13
	ErrReconfigInProgress      Code = -14
	ErrAPIError                Code = -100
	ErrNoNode                  Code = -101
	ErrNoAuth                  Code = -102
	ErrBadVersion              Code = -103
	ErrNoChildrenForEphemerals Code = -108
	ErrNodeExists              Code = -110
	ErrNotEmpty                Code = -111
	ErrSessionExpired          Code = -112
	ErrInvalidCallback         Code = -113
	ErrInvalidACL              Code = -114
	ErrAuthFailed              Code = -115
	ErrSessionMoved            Code = -118
	ErrNotReadOnly             Code = -119
	ErrEphemeralOnLocalSession Code = -120
	ErrNoWatcher               Code = -121
	ErrRequestTimeout          Code = -122
	ErrReconfigDisabled        Code = -123
	ErrQuotaExceeded           Code = -125
	ErrThrottled               Code = -127
)

var codeNames = map[Code]string{
	ErrOK: "ok", ErrSystemError: "system error", ErrRuntimeInconsistency: "runtime inconsistency",
	ErrDataInconsistency: "data inconsistency", ErrConnectionLoss: "connection loss",
	ErrMarshallingError: "marshalling error", ErrUnimplemented: "unimplemented",
	ErrOperationTimeout: "operation timeout", ErrBadArguments: "bad arguments",
	ErrUnknownSession: "unknown session", ErrNewConfigNoQuorum: "new config no quorum",
	ErrReconfigInProgress: "reconfig in progress", ErrAPIError: "api error", ErrNoNode: "no node",
	ErrNoAuth: "not authenticated", ErrBadVersion: "bad version",
	ErrNoChildrenForEphemerals: "no children for ephemerals", ErrNodeExists: "node exists",
	ErrNotEmpty: "not empty", ErrSessionExpired: "session expired",
	ErrInvalidCallback: "invalid callback", ErrInvalidACL: "invalid acl",
	ErrAuthFailed: "auth failed", ErrSessionMoved: "session moved", ErrNotReadOnly: "not read only",
	ErrEphemeralOnLocalSession: "ephemeral on local session", ErrNoWatcher: "no watcher",
	ErrRequestTimeout: "request timeout", ErrReconfigDisabled: "reconfig disabled",
	ErrQuotaExceeded: "quota exceeded", ErrThrottled: "throttled",
}

// Name returns the code's name, as "node exists", or "" for a code
// ZooKeeper does not define.
func (c Code) Name() string { return codeNames[c] }

func (c Code) Error() string {
	if n, ok := codeNames[c]; ok {
		return fmt.Sprintf("zk: %s (%d)", n, int32(c))
	}
	return fmt.Sprintf("zk: error %d", int32(c))
}

// EventType is the type of a watch notification.
type EventType int32

// Watch event types.
const (
	EventNone                EventType = -1
	EventNodeCreated         EventType = 1
	EventNodeDeleted         EventType = 2
	EventNodeDataChanged     EventType = 3
	EventNodeChildrenChanged EventType = 4
)

// State is a ZooKeeper client state as carried in a watch notification.
type State int32

// Session states sent in notifications.
const (
	StateDisconnected  State = 0
	StateSyncConnected State = 3
	StateExpired       State = -112
)

// Permission bits of an ACL.
const (
	PermRead   int32 = 1 << 0
	PermWrite  int32 = 1 << 1
	PermCreate int32 = 1 << 2
	PermDelete int32 = 1 << 3
	PermAdmin  int32 = 1 << 4
	PermAll    int32 = 0x1f
)

// Create flags (CreateMode).
const (
	FlagEphemeral  int32 = 1
	FlagSequential int32 = 2
	FlagContainer  int32 = 4
	// ModePersistentTTL and ModePersistentSequentialTTL are the TTL modes.
	ModePersistentTTL           int32 = 5
	ModePersistentSequentialTTL int32 = 6
)

// Special xids.
const (
	XidNotification int32 = -1
	XidPing         int32 = -2
	XidAuth         int32 = -4
	XidSetWatches   int32 = -8
)

// Protocol limits.
const (
	// DefaultMaxPacket is ZooKeeper's jute.maxbuffer default.
	DefaultMaxPacket = 0xfffff
	// PasswordLen is the length of a session password.
	PasswordLen = 16
	// MaxIdentities bounds the identities one connection holds, its ip
	// identity and super included. ZooKeeper takes any number of addAuth,
	// but here every write carries its caller's identities into the log:
	// unbounded, one client made entries no log store could read back.
	// Clients hold one or two (ClickHouse one digest).
	MaxIdentities = 32
	// MaxIdentityBytes bounds the bytes of a connection's identities,
	// schemes and ids: a digest identity is USER:BASE64(SHA1), 29 bytes
	// past its user name, so 32 of them with names of 200 bytes fit.
	MaxIdentityBytes = 8 << 10
)

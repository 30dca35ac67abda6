package config

import "time"

// Cluster is the whole cluster file.
type Cluster struct {
	// Shards lists the keeper shards; each is one Raft group.
	Shards []Shard `mapstructure:"shards" yaml:"shards"`
	// Nodes lists the keeper processes that host members of several
	// shards (optional): a member placed on a node shares its peer port.
	Nodes []Node `mapstructure:"nodes" yaml:"nodes,omitempty"`
	// Mounts place subtrees on shards for the nodes' client endpoints: a
	// mount's path and everything below it live on its shard, every other
	// path (/zookeeper included) on the root shard.
	Mounts []Mount `mapstructure:"mounts" yaml:"mounts,omitempty"`
	// RootShard names the shard of every path no mount places; the first
	// shard if empty.
	RootShard string `mapstructure:"root_shard" yaml:"root_shard,omitempty"`
	// Keeper holds the tunables shared by every keeper process.
	Keeper Keeper `mapstructure:"keeper" yaml:"keeper"`
	// ClickHouse lists the ClickHouse servers whose tables xkeeper moves
	// partitions between.
	ClickHouse ClickHouse `mapstructure:"clickhouse" yaml:"clickhouse,omitempty"`
	// Tables says which keeper shard holds the metadata of each ClickHouse
	// table: its move records and partition locks.
	Tables []Table `mapstructure:"tables" yaml:"tables,omitempty"`
	// S3 is the bucket whose objects tables share through the object
	// catalog; optional.
	S3 S3 `mapstructure:"s3" yaml:"s3,omitempty"`
	// Security says how members authenticate each other and what clients
	// may do.
	Security Security `mapstructure:"security" yaml:"security,omitempty"`
	// Audit tunes what xkeeper audit reports.
	Audit Audit `mapstructure:"audit" yaml:"audit,omitempty"`
}

// Audit tunes xkeeper audit.
type Audit struct {
	// JournalMaxAge is how long a finished move stays in the journal that
	// audit checks the tables against: older entries' findings are aged
	// out (listed by audit --all only) and a finishing move deletes them.
	// 0 means DefaultJournalMaxAge.
	JournalMaxAge time.Duration `mapstructure:"journal_max_age" yaml:"journal_max_age,omitempty"`
}

// DefaultJournalMaxAge is Audit.JournalMaxAge's default: 30 days.
const DefaultJournalMaxAge = 30 * 24 * time.Hour

// MaxAge returns JournalMaxAge, or its default for 0.
func (a Audit) MaxAge() time.Duration {
	if a.JournalMaxAge > 0 {
		return a.JournalMaxAge
	}
	return DefaultJournalMaxAge
}

// S3 is an S3 bucket and how to reach it.
type S3 struct {
	// Endpoint is the host:port of the S3 API; empty means no S3.
	Endpoint string `mapstructure:"endpoint" yaml:"endpoint,omitempty"`
	// Secure selects https.
	Secure bool `mapstructure:"secure" yaml:"secure,omitempty"`
	// Region is the bucket's region; us-east-1 if empty.
	Region string `mapstructure:"region" yaml:"region,omitempty"`
	// Bucket holds the objects.
	Bucket string `mapstructure:"bucket" yaml:"bucket,omitempty"`
	// Prefix starts every key the catalog owns; objects outside it are
	// never collected.
	Prefix string `mapstructure:"prefix" yaml:"prefix,omitempty"`
	// AccessKey and SecretKey are the credentials.
	AccessKey string `mapstructure:"access_key" yaml:"access_key,omitempty"`
	SecretKey string `mapstructure:"secret_key" yaml:"secret_key,omitempty"`
	// OrphanGrace is how old an object the catalog does not know must be
	// before it counts as an orphan (an upload not yet registered is
	// younger); 1h if zero.
	OrphanGrace time.Duration `mapstructure:"orphan_grace" yaml:"orphan_grace,omitempty"`
}

// Grace returns OrphanGrace, or its default.
func (s S3) Grace() time.Duration {
	if s.OrphanGrace == 0 {
		return time.Hour
	}
	return s.OrphanGrace
}

// ClickHouse is the clickhouse section of the cluster file.
type ClickHouse struct {
	// Servers lists the ClickHouse servers by name.
	Servers []ClickHouseServer `mapstructure:"servers" yaml:"servers,omitempty"`
}

// ClickHouseServer is one ClickHouse server.
type ClickHouseServer struct {
	// Name identifies the server; unique in the file. Tables and commands
	// name the server by it, as in SERVER:DB.TABLE.
	Name string `mapstructure:"name" yaml:"name"`
	// Address is the host:port of the server's native (TCP) protocol.
	Address string `mapstructure:"address" yaml:"address"`
	// User is the ClickHouse user; empty means "default".
	User string `mapstructure:"user" yaml:"user,omitempty"`
	// Password is the user's password; empty for none.
	Password string `mapstructure:"password" yaml:"password,omitempty"`
}

// Table assigns ClickHouse tables to the keeper shard that holds their
// metadata. An entry names one table (server, database and table), every
// table of a database (server and database) or every table of a server
// (server alone); the most specific entry that matches a table wins.
type Table struct {
	// Server is the name of a server of clickhouse.servers.
	Server string `mapstructure:"server" yaml:"server"`
	// Database and Table narrow the entry; Table requires Database.
	Database string `mapstructure:"database" yaml:"database,omitempty"`
	Table    string `mapstructure:"table" yaml:"table,omitempty"`
	// Shard is the name of a shard of shards.
	Shard string `mapstructure:"shard" yaml:"shard"`
}

// Shard is one keeper shard: one Raft group that holds a whole znode tree.
type Shard struct {
	// Name identifies the shard; unique in the file.
	Name string `mapstructure:"name" yaml:"name"`
	// Members lists the keeper processes that replicate the shard.
	Members []Member `mapstructure:"members" yaml:"members"`
}

// Node is one keeper process that hosts members of several shards
// (`xkeeper serve --node NAME`): every member it hosts takes the node's
// peer port as its raft address, so one listener carries the Raft traffic
// and forwarding of all of them, and keeps its data under the node's data
// directory.
type Node struct {
	// Name identifies the node; unique in the file.
	Name string `mapstructure:"name" yaml:"name"`
	// PeerAddr is the host:port of the node's peer port.
	PeerAddr string `mapstructure:"peer_addr" yaml:"peer_addr"`
	// DataDir holds a directory per hosted member, named by its id.
	DataDir string `mapstructure:"data_dir" yaml:"data_dir"`
	// ClientAddr, optional, is the host:port of the node's client
	// endpoint: one ZooKeeper session there reaches every shard, each path
	// on the shard the mounts place it on. The node must host a member of
	// the root shard and of every mounted shard.
	ClientAddr string `mapstructure:"client_addr" yaml:"client_addr,omitempty"`
	// SecureClientAddr, optional, is the same endpoint speaking TLS with
	// security.client_tls.
	SecureClientAddr string `mapstructure:"secure_client_addr" yaml:"secure_client_addr,omitempty"`
}

// Mount places the subtree at Path (the znode and everything below it) on
// Shard, for the nodes' client endpoints.
type Mount struct {
	// Path is the mount point: an absolute znode path, not / nor under
	// /zookeeper.
	Path string `mapstructure:"path" yaml:"path"`
	// Shard is the name of a shard of shards.
	Shard string `mapstructure:"shard" yaml:"shard"`
}

// Member is one member of a shard: a keeper process of its own, or one of
// the members a node hosts.
type Member struct {
	// ID is the member's Raft server id; unique across all shards.
	ID string `mapstructure:"id" yaml:"id"`
	// Node, optional, names the node (nodes[].name) that hosts the member:
	// its raft_addr is then the node's peer_addr and its data_dir defaults
	// to the node's data_dir/ID. A node hosts at most one member of a shard.
	Node string `mapstructure:"node" yaml:"node,omitempty"`
	// ClientAddr is the host:port ZooKeeper clients connect to.
	ClientAddr string `mapstructure:"client_addr" yaml:"client_addr"`
	// SecureClientAddr, optional, is the host:port of the member's TLS
	// client port (security.client_tls); the plain port stays.
	SecureClientAddr string `mapstructure:"secure_client_addr" yaml:"secure_client_addr,omitempty"`
	// HTTPAddr, optional, is the host:port of the member's operator HTTP
	// endpoints: Prometheus /metrics, /ready, /live and /debug/pprof/.
	HTTPAddr string `mapstructure:"http_addr" yaml:"http_addr,omitempty"`
	// RaftAddr is the host:port of the member's Raft transport; for a
	// member on a node, its peer_addr (which may be left out here).
	RaftAddr string `mapstructure:"raft_addr" yaml:"raft_addr,omitempty"`
	// DataDir holds the member's Raft log, stable store and snapshots.
	DataDir string `mapstructure:"data_dir" yaml:"data_dir,omitempty"`
}

// Keeper holds the tunables of the keeper processes. Every field has a
// default (see Default), so the keeper section of the file is optional.
type Keeper struct {
	// Tick is ZooKeeper's tickTime, the unit of the session timeout bounds.
	Tick time.Duration `mapstructure:"tick" yaml:"tick"`
	// MinSessionTimeout is the least session timeout granted; 0 means 2*Tick.
	MinSessionTimeout time.Duration `mapstructure:"min_session_timeout" yaml:"min_session_timeout"`
	// MaxSessionTimeout is the greatest session timeout granted; 0 means 20*Tick.
	MaxSessionTimeout time.Duration `mapstructure:"max_session_timeout" yaml:"max_session_timeout"`
	// MaxPacketBytes bounds a request or response packet, like
	// jute.maxbuffer; at most MaxPacketBytesLimit.
	MaxPacketBytes int `mapstructure:"max_packet_bytes" yaml:"max_packet_bytes"`
	// MaxWatchesPerSession bounds the watches one session holds on a
	// member, MaxWatchesPerMember those all its sessions hold (counted as
	// mntr's zk_watch_count: a persistent watch is two); a watch past
	// either is refused (ZQUOTAEXCEEDED). See Default for the defaults.
	MaxWatchesPerSession int `mapstructure:"max_watches_per_session" yaml:"max_watches_per_session"`
	MaxWatchesPerMember  int `mapstructure:"max_watches_per_member" yaml:"max_watches_per_member"`
	// MaxQueuedBytesPerConnection bounds the replies and notifications a
	// member holds for one client connection, not yet written to its
	// socket; a connection past it (a client that does not read) is
	// closed. At least twice MaxPacketBytes.
	MaxQueuedBytesPerConnection int `mapstructure:"max_queued_bytes_per_connection" yaml:"max_queued_bytes_per_connection"`
	// AvailabilityZone, optional, is the zone a member says it runs in:
	// served read-only at /keeper/availability_zone, as ClickHouse Keeper
	// does, for ClickHouse to prefer keepers of its own zone; empty, the
	// node is absent. Per process: set it with
	// XKEEPER_KEEPER_AVAILABILITY_ZONE where members run in several zones.
	AvailabilityZone string `mapstructure:"availability_zone" yaml:"availability_zone,omitempty"`
	// SnapshotThreshold is how many Raft log entries trigger a snapshot.
	SnapshotThreshold int `mapstructure:"snapshot_threshold" yaml:"snapshot_threshold"`
	// SnapshotInterval is how often Raft checks whether to snapshot.
	SnapshotInterval time.Duration `mapstructure:"snapshot_interval" yaml:"snapshot_interval"`
	// TrailingLogs is how many log entries Raft keeps after a snapshot, at
	// least MinTrailingLogs.
	TrailingLogs int `mapstructure:"trailing_logs" yaml:"trailing_logs"`
	// HeartbeatTimeout is Raft's follower heartbeat timeout.
	HeartbeatTimeout time.Duration `mapstructure:"heartbeat_timeout" yaml:"heartbeat_timeout"`
	// ElectionTimeout is Raft's candidate election timeout.
	ElectionTimeout time.Duration `mapstructure:"election_timeout" yaml:"election_timeout"`
	// LeaderLeaseTimeout is how long a Raft leader stays leader without contact.
	LeaderLeaseTimeout time.Duration `mapstructure:"leader_lease_timeout" yaml:"leader_lease_timeout"`
	// CommitTimeout is how long an idle Raft leader waits before it repeats
	// the commit index to its followers. The leader tells them each commit
	// as it applies it, so this is only the fallback for what that missed
	// (entries the state machine never sees, a notice on a connection that
	// broke); shorter costs idle CPU.
	CommitTimeout time.Duration `mapstructure:"commit_timeout" yaml:"commit_timeout"`
	// EarlyReplies lets a follower answer a client's write as soon as the
	// leader has applied it, instead of after its own apply; the session's
	// later reads wait for the follower to catch up. False turns it off.
	EarlyReplies bool `mapstructure:"early_replies" yaml:"early_replies"`
	// MaxBatchRequests bounds the client requests group-committed in one Raft entry.
	MaxBatchRequests int `mapstructure:"max_batch_requests" yaml:"max_batch_requests"`
	// Fsync makes the Raft stores sync to disk; false only for tests.
	Fsync bool `mapstructure:"fsync" yaml:"fsync"`
	// LogStore is where a member keeps its Raft log: "wal" (hashicorp/raft-wal
	// segment files, one fdatasync per append), "node" (package nodelog: on
	// a node, NODE_DATA_DIR/nodelog, shared by every member the node hosts,
	// one fdatasync per batch for all of them; a member alone keeps one of
	// its own in DATA_DIR/nodelog) or "bolt" (raft-boltdb, two). Empty (the
	// default) means the store the data directory holds, and for a new one
	// node on a node, wal otherwise. A data directory keeps the store it was
	// created with: a member given another one refuses to start.
	LogStore string `mapstructure:"log_store" yaml:"log_store"`
	// TxDeadline is how far ahead, in the coordinator's official time, a
	// cross-shard transaction's deadline is set.
	TxDeadline time.Duration `mapstructure:"tx_deadline" yaml:"tx_deadline"`
	// LockWait is what a request that meets a path locked by a pending
	// cross-shard transaction does: "reject" (ErrLocked at once) or "delay"
	// (wait for the lock, holding the session's later requests behind it).
	LockWait string `mapstructure:"lock_wait" yaml:"lock_wait"`
	// LockWaitMax bounds the wait in delay mode; then the request is refused.
	LockWaitMax time.Duration `mapstructure:"lock_wait_max" yaml:"lock_wait_max"`
	// LockGrace is how long, in reject mode, a request that meets a lock
	// waits for it before it is refused: a cross-shard transaction is
	// answered once every shard holds it pending, and its commits release
	// the locks a moment later, which its client's next request must not
	// find. A lock still there after it is waited for until its
	// transaction is decided, up to about 2 s after the prepare: the
	// driver may have died after answering, and the coordinator takes the
	// transaction over 1 s after the prepare (at least 4 × lock_grace).
	LockGrace time.Duration `mapstructure:"lock_grace" yaml:"lock_grace"`
	// DecisionHold is how long a shard's leader holds a cross-shard
	// transaction's commit or cleanup back for the next request to take it
	// into its entry (the client has its answer already); a request that
	// meets the transaction's lock releases it at once. 0: not held.
	DecisionHold time.Duration `mapstructure:"decision_hold" yaml:"decision_hold"`
	// GCPercent is the Go garbage collector's target (GOGC) for keeper
	// processes. A keeper holds a large live tree and little garbage, so a
	// lower target than Go's 100 trades a little CPU for much less memory
	// per znode. The GOGC environment variable, when set, wins.
	GCPercent int `mapstructure:"gc_percent" yaml:"gc_percent"`
	// LogStallTimeout is how long a leader's Raft log write may stay
	// unanswered (a disk that stopped answering) before the leader stops
	// replicating, so that its followers elect another member instead of
	// waiting for the disk with it; 0 never stops it.
	LogStallTimeout time.Duration `mapstructure:"log_stall_timeout" yaml:"log_stall_timeout"`
	// LeaderBalanceInterval is how often a process hosting members of
	// several shards (a node) checks that it leads no more than its share
	// of them, and hands one leadership to a caught-up member on the node
	// that leads the fewest if it does; 0 turns balancing off.
	LeaderBalanceInterval time.Duration `mapstructure:"leader_balance_interval" yaml:"leader_balance_interval"`
}

// MaxAvailabilityZoneBytes bounds keeper.availability_zone: a name, not
// a document.
const MaxAvailabilityZoneBytes = 256

// MinTrailingLogs is the fewest log entries keeper.trailing_logs may keep
// after a snapshot. A deposed leader may hold up to 64 entries that never
// committed (the proposer's entries in flight); if its new leader had
// compacted its log to within that many entries of where the two logs part,
// it would send a snapshot below the deposed leader's last entry, which
// hashicorp/raft (v1.7.3, issue #697) installs without dropping that
// suffix, and replication to that member would go round in circles. Twice
// the in-flight bound keeps the logs' parting point inside the trailing
// entries.
const MinTrailingLogs = 128

// Default returns the keeper tunables used for every key the file omits.
func Default() Keeper {
	return Keeper{
		Tick:                  2 * time.Second,
		MinSessionTimeout:     0,
		MaxSessionTimeout:     0,
		MaxPacketBytes:        0xfffff,
		SnapshotThreshold:     16384,
		SnapshotInterval:      30 * time.Second,
		TrailingLogs:          10240,
		HeartbeatTimeout:      time.Second,
		ElectionTimeout:       time.Second,
		LeaderLeaseTimeout:    500 * time.Millisecond,
		CommitTimeout:         100 * time.Millisecond,
		EarlyReplies:          true,
		MaxBatchRequests:      1024,
		Fsync:                 true,
		TxDeadline:            5 * time.Second,
		LockWait:              "reject",
		LockWaitMax:           10 * time.Second,
		LockGrace:             200 * time.Millisecond,
		DecisionHold:          5 * time.Millisecond,
		GCPercent:             50,
		LeaderBalanceInterval: 5 * time.Second,
		LogStallTimeout:       5 * time.Second,

		// ClickHouse watches a few znodes per replicated table (its log,
		// queue, replicas' is_active, leader election, block numbers), and
		// Curator's recipes one or two per lock, latch or cache node: a
		// server of thousands of tables holds tens of thousands of
		// watches. 100,000 per session is above any of them, and 10,000,000
		// per member (a hundred such sessions; some GB of watch tables)
		// stops a client that watches every path it can name before it
		// takes the member's memory.
		MaxWatchesPerSession: 100_000,
		MaxWatchesPerMember:  10_000_000,
		// A client that reads keeps its queue near empty. 64 MiB holds
		// twice the largest packet allowed (32 MiB) and a session's whole
		// 100,000 watches firing at once with paths of a few hundred bytes.
		MaxQueuedBytesPerConnection: 64 << 20,
	}
}

// SessionTimeoutBounds returns the session timeouts the keeper grants, with
// a zero MinSessionTimeout read as 2*Tick and a zero MaxSessionTimeout as
// 20*Tick, as ZooKeeper does.
func (k Keeper) SessionTimeoutBounds() (min, max time.Duration) {
	min, max = k.MinSessionTimeout, k.MaxSessionTimeout
	if min == 0 {
		min = 2 * k.Tick
	}
	if max == 0 {
		max = 20 * k.Tick
	}
	return min, max
}

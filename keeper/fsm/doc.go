// Package fsm is a keeper shard's replicated state machine: the znode tree,
// sessions, the shard's official time and zxid, and the rules of every
// ZooKeeper write and read.
//
// It is deterministic and does no I/O: everything it needs arrives in the
// log entry (the proposing leader's wall clock, the session, the caller's
// identities and the request's wire bytes), maps are never iterated into an
// answer unsorted, and two replicas that apply the same entries hold the
// same state. The caller serialises access (one writer, many readers).
//
// The tree is a copy-on-write B-tree, so a snapshot is O(1) to take and is
// written out while applies go on.
package fsm

// Package replica runs one member of a keeper shard: the fsm.State
// replicated by hashicorp/raft, with a raft-boltdb stable store (raft.db), a
// log store chosen by keeper.log_store — hashicorp/raft-wal segment files
// (wal/, the default) or raft-boltdb (raft.db) — and a file snapshot store
// in the member's data directory. The directory records its log store in
// the file log_store; a member started with the other setting refuses.
//
// Client writes become fsm.Requests. The leader gathers the requests that
// arrive while earlier entries are being committed into one log entry
// (group commit) stamped with its wall clock; a follower forwards its
// requests to the leader over a peer link. Every member applies every
// entry, so the member the client is connected to learns the result from
// its own apply, in log order, and only then answers: a client reading from
// that member afterwards sees its own write.
package replica

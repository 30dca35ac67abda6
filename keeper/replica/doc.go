// Package replica runs one member of a keeper shard: the fsm.State
// replicated by hashicorp/raft with raft-boltdb log and stable stores and a
// file snapshot store in the member's data directory.
//
// Client writes become fsm.Requests. The leader gathers the requests that
// arrive while earlier entries are being committed into one log entry
// (group commit) stamped with its wall clock; a follower forwards its
// requests to the leader over a peer link. Every member applies every
// entry, so the member the client is connected to learns the result from
// its own apply, in log order, and only then answers: a client reading from
// that member afterwards sees its own write.
package replica

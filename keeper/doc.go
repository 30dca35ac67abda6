// Package keeper runs keeper shard members: a replicated state machine
// (keeper/fsm) on hashicorp/raft (keeper/replica) behind a ZooKeeper
// wire-compatible server (keeper/server), configured from the shared
// cluster file. The ZooKeeper codec is keeper/proto and the Go client
// keeper/client.
package keeper

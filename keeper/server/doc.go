// Package server serves one keeper member on its client port: ZooKeeper
// framing and handshake, sessions, pipelined requests answered in order,
// watches, session expiry (driven by the leader) and the 4-letter words.
// The same port also accepts members' links, after they prove they are
// members: sessions that carry the cross-shard protocol
// (peerlink.SessionMagic, from older members; current ones arrive on the
// raft port and are handed over by ServeMemberSession) and backups
// (replica.BackupMagic).
package server

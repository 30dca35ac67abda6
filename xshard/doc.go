// Package xshard runs all-or-nothing conditional multi-writes across keeper
// shards by two-phase commit, with one participating shard as coordinator.
//
// The protocol (DESIGN-NOTES.md, "Cross-shard transactions") is carried by
// xkeeper's private opcodes and applied through each shard's Raft log, so
// every step survives a leader change: the coordinator sets a deadline in
// its official time and sends prepare to every participant, itself included,
// in parallel, retrying through unavailability until each answers pending or
// rejected; all pending means commit, anything else fail, sent in parallel;
// cleanup deletes the records afterwards, the coordinator's own last. The
// leader of every shard drives the transactions its shard coordinates to
// their end, and asks the coordinator about those it holds pending past the
// deadline.
package xshard

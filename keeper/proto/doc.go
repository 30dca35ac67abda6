// Package proto is the ZooKeeper wire protocol: jute primitives, frames, the
// connect handshake, every request and response record xkeeper serves, and
// the opcode and error-code tables of ZooKeeper 3.8.
//
// Decoders never trust a length on the wire: every buffer, string and vector
// length is checked against the bytes that remain before anything is
// allocated, so a hostile frame costs at most its own size.
package proto

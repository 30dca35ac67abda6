// Package server serves one keeper member on its client port: ZooKeeper
// framing and handshake, sessions, pipelined requests answered in order,
// watches, session expiry (driven by the leader) and the 4-letter words.
// The same port also accepts the peer links of followers forwarding
// writes to the leader (see replica.ForwardMagic).
package server

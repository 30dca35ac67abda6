// Package client is xkeeper's Go ZooKeeper client: one session on a shard,
// failing over between the shard's members and reattaching the same
// session (with its auths and watches) until the session timeout passes.
// Requests from many goroutines are pipelined on one connection and
// answered in order. Every typed operation is a thin wrapper over
// Client.Do, the extension point for new request types; server errors are
// proto.Code values, so callers test them with errors.Is.
package client

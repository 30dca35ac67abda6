// Package objects keeps the catalog of S3 objects that ClickHouse tables
// share (hard links across tables, possibly across keeper shards), with a
// reference count that cannot disagree with the references, and a
// garbage collector that never deletes a referenced object.
//
// # Znodes
//
// A reference — part file F of part P of table T refers to object K — is
// /xkeeper/s3/refs/T/P/F on T's shard, holding K and K's home shard. An
// object is /xkeeper/s3/objects/H/K on its home shard (the shard of the
// table that registered it; H is one of 256 fan-out directories by a hash
// of K), holding its reference count and its state: live, or deletable
// once the count reached zero. A cross-shard transaction that creates or
// deletes a znode holds an intent on its parent, which stops the parent's
// child lists, reads and changes of the parent itself, and its delete,
// but not other transactions' creates and deletes of siblings; the
// per-part and fan-out directories keep the znodes of unrelated
// operations apart all the same. Every operation is one
// cross-shard transaction (one multi when everything is on one shard), so
// a count always equals the references that exist:
//
//   - Register: a new reference and a new object with count 1.
//   - Link: a new reference to an existing live object, count + 1 at home,
//     conditional on the object's version.
//   - Unlink: the reference removed, count − 1 at home; at zero the object
//     becomes deletable in the same transaction and can never be linked
//     again.
//   - Move (zero-copy): references leave one table and arrive at another;
//     counts do not change and no byte moves.
//
// Every znode of the catalog gets movepart.ACL (security.auth's digest
// alone when it is set), as the workflow's do.
//
// # Garbage collection
//
// GC deletes a deletable object from S3, then its znode (conditional on its
// version): a crash between the two leaves a deletable znode whose object is
// gone, and the next GC finishes it. Objects under the catalog's prefix that
// no shard knows are orphans once older than the grace period (an upload is
// registered within it; Register refuses older uploads), and GC deletes them.
package objects

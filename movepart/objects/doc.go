// Package objects keeps the catalog of S3 objects that ClickHouse tables
// share (hard links across tables, possibly across keeper shards), with a
// reference count that cannot disagree with the references, and a
// garbage collector that never deletes a referenced object.
//
// # Znodes
//
// A reference — part file F of part P of table T refers to object K — is
// /xkeeper/s3/refs/T/P/F on T's shard, holding K and K's home shard. An
// object is /xkeeper/s3/objects/H/K on its home shard (the shard K hashes
// to, whatever the table: one home per key; H is one of 256 fan-out
// directories by a hash of K), holding its reference count, its ETag and
// its state: live, deletable once the count reached zero, or gone once
// GC took it. The znode of a key is never deleted: gone is a tombstone. A cross-shard transaction that creates or
// deletes a znode holds an intent on its parent, which stops the parent's
// child lists, reads and changes of the parent itself, and its delete,
// but not other transactions' creates and deletes of siblings; the
// per-part and fan-out directories keep the znodes of unrelated
// operations apart all the same. Every operation is one
// cross-shard transaction (one multi when everything is on one shard), so
// a count always equals the references that exist:
//
//   - Register: a new reference and a new object with count 1; refused in
//     the same transaction if the key's znode exists (registered, or a
//     tombstone: the bytes must be uploaded again under a new key).
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
// GC deletes a deletable object from S3, then makes its znode a tombstone
// (conditional on its version): a crash between the two leaves a deletable
// znode whose object is gone, and the next GC finishes it. Objects under
// the catalog's prefix that no shard knows are orphans once older than the
// grace period (an upload is registered within it; Register refuses older
// uploads, by its own clock, as advice), and GC creates the key's
// tombstone, then deletes them. Since a registration creates the same
// znode, the two cannot both succeed: a GC paused before its delete, a
// second GC, a registrar whose clock is behind or a slow registration
// never leave a referenced object without its bytes. Bytes found under a
// tombstone (a GC stopped before its delete, an upload again) are deleted
// by the next GC. Deletes are conditional on the ETag GC listed or
// registered (If-Match, on S3 APIs that honour it).
//
// # Exports
//
// An export's uploads are not orphans while its record is there. The
// audit lists a record unchanged for longer than the grace period as an
// abandoned export; AbortExport deletes it, and its uploads become orphans.
// An export that finds the partition in the catalog already answers with
// its files if the table's parts are those registered, and refuses
// otherwise (rows written or merged since).
//
// # Imports
//
// An import's record (one per table partition, kept once done) gives each
// part a directory name in detached/ of its own: the part's name with
// random block numbers (ClickHouse checks only the partition on ATTACH
// PART and numbers the part anew), so a detached part of the operator's is
// never replaced, deleted or attached. Each part goes through fetched
// (downloaded whole), attaching (ATTACH PART sent) and attached, each
// step recorded: a download gone before ATTACH, or refused by the server,
// is fetched again; parts whose references arrive after an import are
// attached by the next one.
package objects

// Package movepart moves and copies ClickHouse partitions between tables
// whose metadata lives on different keeper shards, as a sequence of
// cross-shard transactions that a crash at any moment cannot turn into a
// lost or duplicated partition.
//
// # The workflow
//
// A move of partition P from table S (metadata on shard A) to table D (on
// shard B) is a record, /xkeeper/moves/ID, kept identical on A and B, and a
// partition lock per table, /xkeeper/locks/NAME, on that table's shard:
//
//  1. plan: both tables exist and can exchange parts (clickhouse.Compatible),
//     S has P; the fingerprints of P in S and in D are taken.
//  2. intent (one cross-shard transaction): create the records and the locks.
//     A second move touching P of S or of D fails here: its lock exists.
//  3. stage: on D's server, a staging table gets P's final content: S's rows
//     (REPLACE PARTITION ... FROM on one server, INSERT ... SELECT FROM
//     remote() across servers) plus the rows D already holds in P. Re-run
//     from scratch after a crash. Verified: the staging fingerprint is the
//     sum of S's and D's, and S and D are unchanged since the plan; if not,
//     the move is rolled back.
//  4. staged, then committed (each one cross-shard transaction): the commit
//     point. Before it, recovery rolls the move back (drops the staging
//     table, deletes records and locks), and S and D were never touched;
//     after it, recovery rolls forward.
//  5. apply: REPLACE PARTITION P of D FROM the staging table (idempotent),
//     DROP PARTITION P of S (a move only; idempotent), wait for the
//     replicas of replicated tables; then the records say applied.
//  6. done: the staging table is dropped; one cross-shard transaction
//     deletes records and locks and writes a journal entry on each shard
//     (/xkeeper/journal), which audit checks the tables against later.
//
// # Replicated tables
//
// A ReplicatedMergeTree table's partition is what its replica set holds:
// every part committed through any replica, which the table's keeper path
// records, whether or not the server named in the request has fetched it.
// The plan reads such a table through a replica that holds all of it (the
// named server, or another replica the cluster file names; it waits up to
// Options.Settle for one, then refuses, naming what each lacks), and that
// replica becomes the endpoint's server. The intent also creates a part
// fence per replicated table (proto.PartFencePath, on the table's shard),
// kept until the statements of the apply have run: the shard then refuses
// every entry of the table's replication log that would add rows to the
// partition through any replica (an insert fails; a merge or mutation is
// tried again later), while fetches of committed parts and the move's own
// DROP and REPLACE PARTITION go on. So the checks before the commit point
// see the whole replica set, and the replicated DROP and REPLACE act on
// exactly what was
// copied. Locks of a replicated table are named by its keeper path, so two
// names of one table share them, and a move between two replicas of one
// table is refused.
//
// Every record update is conditional on the record's version, so two
// processes driving the same move cannot both advance it. The process
// driving a move owns it through an ephemeral znode on the source's shard,
// /xkeeper/owners/ID: ownership expires with its session, and recovery
// (package recovery) takes over only moves nobody owns.
//
// When S and D are on the same shard each transaction is one multi.
//
// # Access
//
// Every znode the workflow and the object catalog create gets ACL(cluster):
// with security.auth set, all permissions for its digest identity alone,
// so that no other client of the shards (a ClickHouse server, a stray
// zkCli) can read, change or delete moves, locks, owners, the journal or
// the catalog; the routers given to NewStore, New and objects.New must
// then authenticate as it (AuthOptions), and a shard's refusal fails the
// operation at once with ErrNoAuth. Without security.auth the znodes are
// open to every client, as before it existed. Znodes created open before
// security.auth was set are reported by package recovery's audit and
// given the digest ACL by its Recover (Store.Protect).
package movepart

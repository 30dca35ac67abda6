// Package clickhouse is xkeeper's adapter to ClickHouse servers: what the
// partition-move workflow (package movepart) needs to read from a server and
// the statements it runs there, over clickhouse-go/v2's native protocol.
//
// It targets ClickHouse 18.16 (server revision 54412) and works with later
// servers. What it reads: a table's engine, columns, partition, sorting and
// primary keys and index granularity (Conn.Table), whether two tables can
// exchange parts (Compatible), a table's partitions and a partition's active
// parts (Conn.Partitions, Conn.Parts), and a partition's content fingerprint
// (Conn.Fingerprint). What it runs: REPLACE / ATTACH PARTITION ... FROM,
// DROP PARTITION, CREATE and DROP of a staging table, a cross-server copy of
// a partition by INSERT ... SELECT FROM remote(), and a wait until every
// replica of a replicated table has caught up.
//
// # Partitions are named by id
//
// Every function takes a partition id, the partition_id column of
// system.parts ("202401", "all", a hash for some keys), never a partition
// expression. ALTER statements address the partition as PARTITION ID 'id',
// which 18.16 accepts for REPLACE, ATTACH ... FROM and DROP; reads filter on
// the _partition_id virtual column, which 18.16 has on MergeTree tables and
// which remote() passes through to the remote table.
//
// # Query ids
//
// Every statement takes a query id prefix qid, normally the move's id, and
// runs with the ClickHouse query_id QueryID(qid, op), where op names the
// statement (OpReplacePartition, ...). Connections set log_queries=1, so
// system.query_log on each server shows what a move did there (Conn.QueryLog
// reads it back). ClickHouse refuses a query whose id is already running on
// that server; a statement then waits for the running one to end and runs
// after it (CopyPartitionRemote kills an earlier copy instead), so the same
// step of one move never runs twice at once on a server.
//
// # Idempotence
//
// ReplacePartitionFrom, DropPartition, CreateStagingLike, DropTable,
// CopyPartitionRemote and SyncReplica may be run again after a crash or an
// error and leave the same state as one run. AttachPartitionFrom adds the
// source's parts each time it runs; the workflow uses it only where a second
// run cannot happen or ReplacePartitionFrom undoes it. ReplacePartitionFrom,
// AttachPartitionFrom and CopyPartitionRemote refuse a source that has no
// active part in the partition (ErrNoPartition): replacing a partition by an
// absent one would empty the destination's.
//
// # Errors
//
// Errors are *Error values that name the server, the table and the
// partition. errors.Is tells ErrNoTable (a table or database that does not
// exist), ErrNoPartition and ErrIncompatible apart; errors.As finds the
// server's *clickhouse.Exception (with its code) underneath.
//
// # ClickHouse 18.16
//
// clickhouse-go/v2 negotiates the server's older revision: settings are then
// sent in the old binary form, which takes integer and boolean values only,
// and server-side query parameters are unavailable, so this package quotes
// every identifier and literal itself. Over the native protocol an
// INSERT ... VALUES run by Exec hangs on 18.16 (the server waits for data
// blocks) and a batch insert needs an explicit column list; this package
// inserts only by INSERT ... SELECT. 18.16 has no MOVE PARTITION ... TO
// TABLE (the workflow uses REPLACE PARTITION ... FROM and DROP PARTITION);
// its REPLACE PARTITION ... FROM does not check index_granularity (nor, by
// the same check, does ATTACH PARTITION ... FROM), and parts from a table
// with another granularity are then read wrongly, so Compatible checks it.
package clickhouse

package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"strings"

	ch "github.com/ClickHouse/clickhouse-go/v2"
)

// checkQID refuses an empty query id prefix: every statement must be
// traceable to its move in system.query_log.
func (c *Conn) checkQID(op, table, partition, qid string) error {
	if qid == "" {
		return &Error{Server: c.server.Name, Op: op, Table: table, Partition: partition, Err: errors.New("empty query id")}
	}
	return nil
}

// ReplacePartitionFrom replaces partition partitionID of dstDB.dst by a copy
// of srcDB.src's (ALTER TABLE dst REPLACE PARTITION ID ... FROM src), under
// query id QueryID(qid, OpReplacePartition). The source keeps its parts;
// both tables are on this server and must be Compatible. Idempotent: a
// second run leaves the same content. The source must have an active part
// in the partition (else ErrNoPartition): replacing by nothing would empty
// the destination's partition.
func (c *Conn) ReplacePartitionFrom(ctx context.Context, qid, dstDB, dst, srcDB, src, partitionID string) error {
	return c.fromPartition(ctx, "REPLACE", "replace partition of", OpReplacePartition, qid, dstDB, dst, srcDB, src, partitionID)
}

// AttachPartitionFrom adds a copy of srcDB.src's parts of partition
// partitionID to dstDB.dst (ALTER TABLE dst ATTACH PARTITION ID ... FROM
// src), under query id QueryID(qid, OpAttachPartition), keeping the rows dst
// already had there. The source keeps its parts. Not idempotent: each run
// adds the rows again. The source must have an active part in the
// partition (else ErrNoPartition).
func (c *Conn) AttachPartitionFrom(ctx context.Context, qid, dstDB, dst, srcDB, src, partitionID string) error {
	return c.fromPartition(ctx, "ATTACH", "attach partition to", OpAttachPartition, qid, dstDB, dst, srcDB, src, partitionID)
}

func (c *Conn) fromPartition(ctx context.Context, verb, op, qop, qid, dstDB, dst, srcDB, src, partitionID string) error {
	name := tableName(dstDB, dst)
	what := op + " " + name + " from"
	if err := c.checkQID(what, tableName(srcDB, src), partitionID, qid); err != nil {
		return err
	}
	if _, err := c.activeParts(ctx, what, srcDB, src, partitionID); err != nil {
		return err
	}
	if err := c.mustExist(ctx, op, dstDB, dst, partitionID); err != nil {
		return err
	}
	id := QueryID(qid, qop)
	err := c.exec(ctx, id, "ALTER TABLE "+qualified(dstDB, dst)+" "+verb+" PARTITION ID "+quote(partitionID)+
		" FROM "+qualified(srcDB, src))
	if err != nil {
		return c.fail(what, tableName(srcDB, src), partitionID, id, err)
	}
	return nil
}

// DropPartition drops partition partitionID of db.table (ALTER TABLE ...
// DROP PARTITION ID ...), under query id QueryID(qid, OpDropPartition).
// Idempotent: dropping a partition that has no parts succeeds. The table
// must exist (else ErrNoTable).
func (c *Conn) DropPartition(ctx context.Context, qid, db, table, partitionID string) error {
	return c.dropPartition(ctx, "drop partition of", OpDropPartition, qid, db, table, partitionID)
}

func (c *Conn) dropPartition(ctx context.Context, op, qop, qid, db, table, partitionID string) error {
	name := tableName(db, table)
	if err := c.checkQID(op, name, partitionID, qid); err != nil {
		return err
	}
	if err := c.mustExist(ctx, op, db, table, partitionID); err != nil {
		return err
	}
	id := QueryID(qid, qop)
	if err := c.exec(ctx, id, "ALTER TABLE "+qualified(db, table)+" DROP PARTITION ID "+quote(partitionID)); err != nil {
		return c.fail(op, name, partitionID, id, err)
	}
	return nil
}

// CreateStagingLike creates db.staging, a plain MergeTree table whose parts
// are interchangeable with like's (see Compatible): the same columns, keys,
// sampling and granularity, without replication and without the merges of
// engines such as ReplacingMergeTree that would change its rows. It runs
// CREATE TABLE IF NOT EXISTS under query id QueryID(qid, OpCreateStaging)
// and is idempotent; a db.staging that exists already but is not
// Compatible with like is an error wrapping ErrIncompatible.
func (c *Conn) CreateStagingLike(ctx context.Context, qid, db, staging string, like *Table) error {
	const op = "create staging table"
	name := tableName(db, staging)
	if err := c.checkQID(op, name, "", qid); err != nil {
		return err
	}
	e, err := parseEngine(like.EngineFull)
	if err != nil {
		return &Error{Server: c.server.Name, Op: op, Table: name, Err: fmt.Errorf("like %s: %w", like, err)}
	}
	var cols []string
	for _, col := range like.Columns {
		def := ident(col.Name) + " " + col.Type
		if col.DefaultKind != "" {
			def += " " + col.DefaultKind + " " + col.DefaultExpression
		}
		cols = append(cols, def)
	}
	id := QueryID(qid, OpCreateStaging)
	err = c.exec(ctx, id, "CREATE TABLE IF NOT EXISTS "+qualified(db, staging)+" ("+strings.Join(cols, ", ")+") ENGINE = "+e.plainMergeTree())
	if err != nil {
		return c.fail(op, name, "", id, err)
	}
	got, err := c.Table(ctx, db, staging)
	if err != nil {
		return err
	}
	if got.Engine != "MergeTree" {
		err = fmt.Errorf("%w: %s exists with engine %s, not MergeTree", ErrIncompatible, got, got.Engine)
	} else {
		err = Compatible(got, like)
	}
	if err != nil {
		return &Error{Server: c.server.Name, Op: op, Table: name, QueryID: id, Err: err}
	}
	return nil
}

// DropTable drops db.table if it exists (DROP TABLE IF EXISTS), under
// query id QueryID(qid, OpDropTable). Idempotent.
func (c *Conn) DropTable(ctx context.Context, qid, db, table string) error {
	const op = "drop table"
	name := tableName(db, table)
	if err := c.checkQID(op, name, "", qid); err != nil {
		return err
	}
	id := QueryID(qid, OpDropTable)
	if err := c.exec(ctx, id, "DROP TABLE IF EXISTS "+qualified(db, table)); err != nil {
		return c.fail(op, name, "", id, err)
	}
	return nil
}

// CopyPartitionRemote makes partition partitionID of dstDB.dst, on this
// server, a copy of srcDB.src's on the server at srcAddr (its native
// address, reached from this server), read with srcUser and srcPassword
// through remote(). It kills a copy of an earlier run that is still
// running on this server (KILL QUERY ... SYNC of its query id), drops the
// partition of dst (query id QueryID(qid, OpCopyClear)), then runs
//
//	INSERT INTO dst (columns) SELECT columns FROM remote(srcAddr, srcDB, src, ...)
//	WHERE _partition_id = partitionID
//
// with insert_deduplicate=0 under QueryID(qid, OpCopyPartition), so a run
// after a crash or an error starts again from scratch and the result is
// one copy: idempotent, and meant for a staging table, whose partition it
// replaces. Two runs with the same qid at the same time are not safe: the
// caller verifies the copy's Fingerprint. The source must have an active
// part in the partition (else ErrNoPartition; ErrNoTable for a missing
// source table).
//
// The source password is part of the statement's text, so it shows in
// this server's system.query_log and logs.
func (c *Conn) CopyPartitionRemote(ctx context.Context, qid, dstDB, dst, srcAddr, srcUser, srcPassword, srcDB, src, partitionID string) error {
	name := tableName(dstDB, dst)
	srcName := srcAddr + ":" + tableName(srcDB, src)
	op := "copy partition to " + name + " from"
	if err := c.checkQID(op, srcName, partitionID, qid); err != nil {
		return err
	}
	if srcUser == "" {
		srcUser = "default"
	}
	t, err := c.Table(ctx, dstDB, dst)
	if err != nil {
		return err
	}
	remote := func(db, table string) string {
		return "remote(" + quote(srcAddr) + ", " + quote(db) + ", " + quote(table) + ", " + quote(srcUser) + ", " + quote(srcPassword) + ")"
	}
	// Check the source through remote() itself: this also proves that
	// this server reaches the source with these credentials.
	var tables, parts uint64
	err = c.db.QueryRow(ctx, "SELECT (SELECT count() FROM "+remote("system", "tables")+" WHERE database = "+quote(srcDB)+" AND name = "+quote(src)+
		"), (SELECT count() FROM "+remote("system", "parts")+" WHERE database = "+quote(srcDB)+" AND table = "+quote(src)+
		" AND partition_id = "+quote(partitionID)+" AND active)").Scan(&tables, &parts)
	switch {
	case err != nil:
		return c.fail(op, srcName, partitionID, "", err)
	case tables == 0:
		return c.fail(op, srcName, partitionID, "", ErrNoTable)
	case parts == 0:
		return c.fail(op, srcName, partitionID, "", ErrNoPartition)
	}
	// A copy of an earlier run that is still going (its process crashed
	// or gave up) would add rows after the clear: end it first.
	id := QueryID(qid, OpCopyPartition)
	if err := c.exec(ctx, "", "KILL QUERY WHERE query_id = "+quote(id)+" SYNC"); err != nil {
		return c.fail("stop an earlier copy to "+name+" from", srcName, partitionID, id, err)
	}
	if err := c.dropPartition(ctx, "clear before copy partition of", OpCopyClear, qid, dstDB, dst, partitionID); err != nil {
		return err
	}
	var cols []string
	for _, col := range t.Columns {
		if col.insertable() {
			cols = append(cols, ident(col.Name))
		}
	}
	list := strings.Join(cols, ", ")
	ictx := ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_deduplicate": 0}))
	err = c.exec(ictx, id, "INSERT INTO "+qualified(dstDB, dst)+" ("+list+") SELECT "+list+" FROM "+remote(srcDB, src)+
		" WHERE _partition_id = "+quote(partitionID))
	if err != nil {
		return c.fail(op, srcName, partitionID, id, err)
	}
	return nil
}

// Query ids of the statements of the S3 round trip (package movepart/objects).
const (
	OpFreezePartition = "freeze-partition"
	OpAttachPart      = "attach-part"
)

// FreezePartition snapshots partition partitionID of db.table into the
// server's shadow directory (ALTER TABLE ... FREEZE PARTITION ID ...): hard
// links of its active parts under shadow/N/data/DB/TABLE/, N being the
// number the server's shadow/increment.txt then holds.
func (c *Conn) FreezePartition(ctx context.Context, qid, db, table, partitionID string) error {
	const op = "freeze partition of"
	name := tableName(db, table)
	if err := c.checkQID(op, name, partitionID, qid); err != nil {
		return err
	}
	if err := c.mustExist(ctx, op, db, table, partitionID); err != nil {
		return err
	}
	id := QueryID(qid, OpFreezePartition)
	if err := c.exec(ctx, id, "ALTER TABLE "+qualified(db, table)+" FREEZE PARTITION ID "+quote(partitionID)); err != nil {
		return c.fail(op, name, partitionID, id, err)
	}
	return nil
}

// AttachPart attaches the part directory detached/part of db.table (ALTER
// TABLE ... ATTACH PART): the server checks it, gives it new block numbers
// and moves it into the table. Not idempotent: the caller records it.
func (c *Conn) AttachPart(ctx context.Context, qid, db, table, part string) error {
	const op = "attach part to"
	name := tableName(db, table)
	if err := c.checkQID(op, name, part, qid); err != nil {
		return err
	}
	id := QueryID(qid, OpAttachPart)
	if err := c.exec(ctx, id, "ALTER TABLE "+qualified(db, table)+" ATTACH PART "+quote(part)); err != nil {
		return c.fail(op, name, part, id, err)
	}
	return nil
}

// DataPath returns the directory of db.table's data on the server's file
// system (system.tables.data_path), for tools running beside the server.
func (c *Conn) DataPath(ctx context.Context, db, table string) (string, error) {
	const op = "find the data directory of"
	if err := c.mustExist(ctx, op, db, table, ""); err != nil {
		return "", err
	}
	var path string
	err := c.db.QueryRow(ctx, "SELECT data_path FROM system.tables WHERE database = "+quote(db)+" AND name = "+quote(table)).Scan(&path)
	if err != nil {
		return "", c.fail(op, tableName(db, table), "", "", err)
	}
	return path, nil
}

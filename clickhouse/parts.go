package clickhouse

import (
	"context"
	"regexp"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Partition is one partition of a table with its active parts added up.
type Partition struct {
	// ID is the partition id, what every function of this package takes.
	ID string
	// Value is the partition key's value as system.parts.partition shows
	// it, as in "202401" or "('2024-01-01', 3)".
	Value string
	Parts uint64
	Rows  uint64
	Bytes uint64 // on disk
}

// Part is one active data part.
type Part struct {
	Name  string `json:"name"`
	Rows  uint64 `json:"rows"`
	Bytes uint64 `json:"bytes"` // on disk
	// Uncompressed is the size of the part's column data uncompressed and
	// Marks its number of index marks. With Rows and Bytes they tell a
	// part from another; a copy by hard links (REPLACE / ATTACH
	// PARTITION ... FROM on one server) has all four equal.
	Uncompressed uint64 `json:"uncompressed"`
	Marks        uint64 `json:"marks"`
}

// SameShape reports whether parts a and b, as multisets, have equal rows,
// sizes and marks part by part: what a copy of parts by hard links keeps.
func SameShape(a, b []Part) bool {
	key := func(p Part) [4]uint64 { return [4]uint64{p.Rows, p.Bytes, p.Uncompressed, p.Marks} }
	count := map[[4]uint64]int{}
	for _, p := range a {
		count[key(p)]++
	}
	for _, p := range b {
		count[key(p)]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return true
}

// Fingerprint sums up a partition's content: its row count and an
// order-independent hash of every row, equal for two partitions that hold
// the same multiset of rows however they are split into parts.
type Fingerprint struct {
	Rows uint64
	Hash uint64
}

// Partitions lists the partitions of db.table that have active parts, by id.
func (c *Conn) Partitions(ctx context.Context, db, table string) ([]Partition, error) {
	const op = "list partitions of"
	if err := c.mustExist(ctx, op, db, table, ""); err != nil {
		return nil, err
	}
	var out []Partition
	err := c.selectRows(ctx, `SELECT partition_id, any(partition), count(), sum(rows), sum(bytes_on_disk)
		FROM system.parts WHERE database = `+quote(db)+` AND table = `+quote(table)+` AND active
		GROUP BY partition_id ORDER BY partition_id`,
		func(r driver.Rows) error {
			var p Partition
			if err := r.Scan(&p.ID, &p.Value, &p.Parts, &p.Rows, &p.Bytes); err != nil {
				return err
			}
			out = append(out, p)
			return nil
		})
	if err != nil {
		return nil, c.fail(op, tableName(db, table), "", "", err)
	}
	return out, nil
}

// Parts lists the active parts of partition partitionID of db.table by
// name. A partition without active parts is an error wrapping
// ErrNoPartition; a missing table one wrapping ErrNoTable.
func (c *Conn) Parts(ctx context.Context, db, table, partitionID string) ([]Part, error) {
	return c.activeParts(ctx, "list parts of", db, table, partitionID)
}

// activeParts lists the active parts of the partition, or returns an error
// wrapping ErrNoTable or ErrNoPartition that names op.
func (c *Conn) activeParts(ctx context.Context, op, db, table, partitionID string) ([]Part, error) {
	if err := c.mustExist(ctx, op, db, table, partitionID); err != nil {
		return nil, err
	}
	var out []Part
	err := c.selectRows(ctx, `SELECT name, rows, bytes_on_disk, data_uncompressed_bytes, marks FROM system.parts
		WHERE database = `+quote(db)+` AND table = `+quote(table)+` AND partition_id = `+quote(partitionID)+` AND active
		ORDER BY name`,
		func(r driver.Rows) error {
			var p Part
			if err := r.Scan(&p.Name, &p.Rows, &p.Bytes, &p.Uncompressed, &p.Marks); err != nil {
				return err
			}
			out = append(out, p)
			return nil
		})
	if err != nil {
		return nil, c.fail(op, tableName(db, table), partitionID, "", err)
	}
	if len(out) == 0 {
		return nil, c.fail(op, tableName(db, table), partitionID, "", ErrNoPartition)
	}
	return out, nil
}

// Fingerprint returns the row count and the sum, wrapping modulo 2^64, of
// cityHash64 over every stored column of each row of partition partitionID
// of db.table. A partition without rows has the zero Fingerprint; a missing
// table is an error wrapping ErrNoTable. Two compatible tables (see
// Compatible) hash equal rows equally, on any server of the same version.
//
// cityHash64 takes most types as they are (DateTime as its number, so the
// server's time zone does not matter); Nullable columns are hashed as a
// null flag and the value (LowCardinality(Nullable) ones first cast to
// Nullable), Decimal and UUID columns, which 18.16's
// cityHash64 refuses, as text, and so are composite columns that contain
// them (a DateTime inside those is then text in the server's time zone).
func (c *Conn) Fingerprint(ctx context.Context, db, table, partitionID string) (Fingerprint, error) {
	const op = "fingerprint"
	t, err := c.Table(ctx, db, table)
	if err != nil {
		return Fingerprint{}, err
	}
	var f Fingerprint
	err = c.db.QueryRow(ctx, "SELECT count(), sum(cityHash64("+hashArgs(t.Columns)+")) FROM "+qualified(db, table)+
		" WHERE _partition_id = "+quote(partitionID)).Scan(&f.Rows, &f.Hash)
	if err != nil {
		return Fingerprint{}, c.fail(op, tableName(db, table), partitionID, "", err)
	}
	return f, nil
}

// hashArgs returns the arguments of cityHash64 that hash a row's stored
// columns.
func hashArgs(cols []Column) string {
	var args []string
	for _, col := range cols {
		if col.stored() {
			args = append(args, hashArg(ident(col.Name), col.Type)...)
		}
	}
	return strings.Join(args, ", ")
}

var (
	nullableType       = regexp.MustCompile(`^Nullable\((.*)\)$`)
	lowCardinalityNull = regexp.MustCompile(`^LowCardinality\((Nullable\(.*\))\)$`)
	// hashAsText matches the types 18.16's cityHash64 refuses, wherever
	// they appear in a type.
	hashAsText = regexp.MustCompile(`\b(Nullable|Decimal(32|64|128)?|UUID)\(|\bUUID\b`)
)

// hashArg returns cityHash64 arguments for expression expr of type typ.
func hashArg(expr, typ string) []string {
	// 18.16's cityHash64, isNull and toString mishandle
	// LowCardinality(Nullable(T)); as Nullable(T) it is hashed like one.
	if m := lowCardinalityNull.FindStringSubmatch(typ); m != nil {
		return hashArg("CAST("+expr+" AS "+m[1]+")", m[1])
	}
	if m := nullableType.FindStringSubmatch(typ); m != nil {
		return append([]string{"isNull(" + expr + ")"}, hashArg("assumeNotNull("+expr+")", m[1])...)
	}
	if hashAsText.MatchString(typ) {
		return []string{"toString(" + expr + ")"}
	}
	return []string{expr}
}

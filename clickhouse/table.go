package clickhouse

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Table is what a server says about one table.
type Table struct {
	Server   string // the server's name
	Database string
	Name     string
	// Engine is the engine's name, as in "ReplicatedMergeTree"; EngineFull
	// is the whole ENGINE clause as system.tables.engine_full shows it.
	Engine, EngineFull string
	// Replicated is set for the Replicated*MergeTree engines, with the
	// table's ZooKeeper path and this server's replica name, macros
	// expanded, from system.replicas.
	Replicated    bool
	ZooKeeperPath string
	ReplicaName   string
	// Columns lists every column, aliases included, in the table's order.
	Columns []Column
	// PartitionKey, SortingKey and PrimaryKey are the key expressions, as
	// system.tables shows them ("" when the table has none).
	PartitionKey, SortingKey, PrimaryKey string
	// LegacySyntax is set for a MergeTree declared the pre-2018 way,
	// MergeTree(date, key, granularity): its parts have format version 0
	// and cannot move to or from a table declared with PARTITION BY.
	LegacySyntax bool
	// IndexGranularity is the rows per mark of the table's parts; 0 for a
	// table that is not of the MergeTree family.
	IndexGranularity uint64
	// CreateStatement is the table's CREATE TABLE statement.
	CreateStatement string
}

// Column is one column of a table.
type Column struct {
	Name string
	Type string
	// DefaultKind is "", "DEFAULT", "MATERIALIZED" or "ALIAS", with the
	// expression in DefaultExpression.
	DefaultKind, DefaultExpression string
}

// stored reports whether the column's values are in the table's parts.
func (c Column) stored() bool { return c.DefaultKind != "ALIAS" }

// insertable reports whether an INSERT may give the column's values.
func (c Column) insertable() bool { return c.DefaultKind == "" || c.DefaultKind == "DEFAULT" }

// String returns "server:db.table".
func (t *Table) String() string { return t.Server + ":" + t.Database + "." + t.Name }

// MergeTree reports whether the table is of the MergeTree family, the only
// tables that have partitions and parts.
func (t *Table) MergeTree() bool { return strings.HasSuffix(t.Engine, "MergeTree") }

// MergesChangeRows reports whether the table's merges change its rows
// (Replacing, Collapsing, Summing, Aggregating, Graphite MergeTree): its
// row count and fingerprint then shrink with no row lost.
func (t *Table) MergesChangeRows() bool {
	e := strings.TrimPrefix(t.Engine, "Replicated")
	return t.MergeTree() && e != "MergeTree"
}

// Table reads db.table's engine, columns and keys. A table that does not
// exist is an error wrapping ErrNoTable.
func (c *Conn) Table(ctx context.Context, db, table string) (*Table, error) {
	const op = "read table"
	name := tableName(db, table)
	t := &Table{Server: c.server.Name, Database: db, Name: table}
	err := c.db.QueryRow(ctx, `SELECT engine, engine_full, partition_key, sorting_key, primary_key, create_table_query
		FROM system.tables WHERE database = `+quote(db)+` AND name = `+quote(table)).
		Scan(&t.Engine, &t.EngineFull, &t.PartitionKey, &t.SortingKey, &t.PrimaryKey, &t.CreateStatement)
	if isNoRows(err) {
		return nil, c.fail(op, name, "", "", ErrNoTable)
	}
	if err != nil {
		return nil, c.fail(op, name, "", "", err)
	}
	// system.columns lists a table's columns in the order of its
	// definition, the same order DESCRIBE TABLE and SELECT * use.
	err = c.selectRows(ctx, `SELECT name, type, default_kind, default_expression
		FROM system.columns WHERE database = `+quote(db)+` AND table = `+quote(table),
		func(r driver.Rows) error {
			var col Column
			if err := r.Scan(&col.Name, &col.Type, &col.DefaultKind, &col.DefaultExpression); err != nil {
				return err
			}
			t.Columns = append(t.Columns, col)
			return nil
		})
	if err != nil {
		return nil, c.fail(op, name, "", "", err)
	}
	if len(t.Columns) == 0 { // dropped between the two queries
		return nil, c.fail(op, name, "", "", ErrNoTable)
	}
	if t.CreateStatement == "" {
		if err := c.db.QueryRow(ctx, "SHOW CREATE TABLE "+qualified(db, table)).Scan(&t.CreateStatement); err != nil {
			return nil, c.fail(op, name, "", "", err)
		}
	}
	if t.MergeTree() {
		e, err := parseEngine(t.EngineFull)
		if err != nil {
			return nil, c.fail(op, name, "", "", err)
		}
		t.Replicated, t.LegacySyntax, t.IndexGranularity = e.replicated, e.legacy, e.granularity
	}
	if t.Replicated {
		err := c.db.QueryRow(ctx, `SELECT zookeeper_path, replica_name FROM system.replicas
			WHERE database = `+quote(db)+` AND table = `+quote(table)).Scan(&t.ZooKeeperPath, &t.ReplicaName)
		if err != nil {
			return nil, c.fail(op+" replica", name, "", "", err)
		}
	}
	return t, nil
}

// Compatible returns nil if parts of a can be attached to b and rows of a
// inserted into b unchanged: both of the MergeTree family, with the same
// columns (names, types and kinds, in order), partition key, sorting key,
// primary key, index granularity and partition format. Otherwise it returns
// an error wrapping ErrIncompatible that lists every difference.
func Compatible(a, b *Table) error {
	var diffs []string
	differ := func(what, x, y string) {
		if x != y {
			diffs = append(diffs, fmt.Sprintf("%s %s vs %s", what, show(x), show(y)))
		}
	}
	for _, t := range []*Table{a, b} {
		if !t.MergeTree() {
			diffs = append(diffs, fmt.Sprintf("%s has engine %s, not of the MergeTree family", t, t.Engine))
		}
	}
	for i := range max(len(a.Columns), len(b.Columns)) {
		switch {
		case i >= len(a.Columns):
			diffs = append(diffs, fmt.Sprintf("column %d %s only in %s", i+1, b.Columns[i].describe(), b))
		case i >= len(b.Columns):
			diffs = append(diffs, fmt.Sprintf("column %d %s only in %s", i+1, a.Columns[i].describe(), a))
		default:
			x, y := a.Columns[i], b.Columns[i]
			if x.Name != y.Name || x.Type != y.Type || x.DefaultKind != y.DefaultKind {
				diffs = append(diffs, fmt.Sprintf("column %d %s vs %s", i+1, x.describe(), y.describe()))
			}
		}
	}
	differ("partition key", a.PartitionKey, b.PartitionKey)
	differ("sorting key", a.SortingKey, b.SortingKey)
	differ("primary key", a.PrimaryKey, b.PrimaryKey)
	if a.MergeTree() && b.MergeTree() {
		differ("index granularity", strconv.FormatUint(a.IndexGranularity, 10), strconv.FormatUint(b.IndexGranularity, 10))
		differ("syntax", a.syntax(), b.syntax())
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s and %s: %s", ErrIncompatible, a, b, strings.Join(diffs, "; "))
}

func show(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func (c Column) describe() string {
	s := c.Name + " " + c.Type
	if c.DefaultKind != "" {
		s += " " + c.DefaultKind
	}
	return s
}

func (t *Table) syntax() string {
	if t.LegacySyntax {
		return "MergeTree(date, key, granularity) (format version 0)"
	}
	return "PARTITION BY (format version 1)"
}

// engine is a MergeTree-family ENGINE clause taken apart.
type engine struct {
	name        string   // as written, as in "ReplicatedReplacingMergeTree"
	args        []string // the engine's arguments, as written
	rest        string   // PARTITION BY ... ORDER BY ... SETTINGS ..., or "" for legacy syntax
	replicated  bool
	legacy      bool
	granularity uint64
}

var (
	engineName       = regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_]*)\s*`)
	granularitySetng = regexp.MustCompile(`\bindex_granularity\s*=\s*([0-9]+)`)
	unsignedLiteral  = regexp.MustCompile(`^[0-9]+$`)
)

// defaultGranularity is MergeTree's index_granularity when none is given.
const defaultGranularity = 8192

// parseEngine takes apart a MergeTree-family engine_full.
func parseEngine(full string) (engine, error) {
	var e engine
	m := engineName.FindStringSubmatch(full)
	if m == nil || !strings.HasSuffix(m[1], "MergeTree") {
		return e, fmt.Errorf("engine %q is not of the MergeTree family", full)
	}
	e.name = m[1]
	rest := full[len(m[0]):]
	if strings.HasPrefix(rest, "(") {
		args, n, err := splitArgs(rest)
		if err != nil {
			return e, fmt.Errorf("engine %q: %v", full, err)
		}
		e.args, rest = args, rest[n:]
	}
	e.rest = strings.TrimSpace(rest)
	e.replicated = strings.HasPrefix(e.name, "Replicated")
	base := e.args
	if e.replicated {
		if len(base) < 2 {
			return e, fmt.Errorf("engine %q: a replicated engine needs a ZooKeeper path and a replica name", full)
		}
		base = base[2:]
	}
	// Only the legacy syntax lacks ORDER BY: the new one requires it.
	e.legacy = e.rest == ""
	if e.legacy {
		// MergeTree(date, [sampling,] key, granularity, engine args...)
		for _, a := range base {
			if unsignedLiteral.MatchString(a) {
				g, err := strconv.ParseUint(a, 10, 64)
				if err != nil {
					return e, fmt.Errorf("engine %q: index granularity %q: %v", full, a, err)
				}
				e.granularity = g
				break
			}
		}
		if e.granularity == 0 {
			return e, fmt.Errorf("engine %q: no index granularity among the arguments", full)
		}
		return e, nil
	}
	e.granularity = defaultGranularity
	if g := granularitySetng.FindStringSubmatch(e.rest); g != nil {
		v, err := strconv.ParseUint(g[1], 10, 64)
		if err != nil {
			return e, fmt.Errorf("engine %q: index granularity %q: %v", full, g[1], err)
		}
		e.granularity = v
	}
	return e, nil
}

// plainMergeTree returns the ENGINE clause of a plain MergeTree whose parts
// are interchangeable with e's: the same keys, sampling, granularity and
// format version, without replication and without the merge-time
// transformations (replacing, collapsing, summing...) that would change the
// rows of a staged partition.
func (e engine) plainMergeTree() string {
	if !e.legacy {
		return "MergeTree " + e.rest
	}
	base := e.args
	if e.replicated {
		base = base[2:]
	}
	for i, a := range base {
		if unsignedLiteral.MatchString(a) {
			base = base[:i+1]
			break
		}
	}
	return "MergeTree(" + strings.Join(base, ", ") + ")"
}

// splitArgs splits a parenthesised, comma-separated argument list at the
// start of s, honouring nested brackets and quotes. It returns the trimmed
// arguments and the length of the list including its parentheses.
func splitArgs(s string) ([]string, int, error) {
	var args []string
	depth, start := 0, 1
	var quoteChar byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if quoteChar != 0 {
			switch c {
			case '\\':
				i++
			case quoteChar:
				quoteChar = 0
			}
			continue
		}
		switch c {
		case '\'', '"', '`':
			quoteChar = c
		case '(', '[':
			depth++
		case ')', ']':
			depth--
			if depth == 0 {
				if a := strings.TrimSpace(s[start:i]); a != "" || len(args) > 0 {
					args = append(args, a)
				}
				return args, i + 1, nil
			}
		case ',':
			if depth == 1 {
				args = append(args, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return nil, 0, fmt.Errorf("unbalanced parentheses")
}

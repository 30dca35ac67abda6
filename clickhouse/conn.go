package clickhouse

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Server is one ClickHouse server as the cluster file names it.
type Server struct {
	// Name identifies the server in errors and in the cluster file.
	Name string
	// Addr is the host:port of the server's native (TCP) protocol.
	Addr string
	// User and Password authenticate; an empty User means "default".
	User, Password string
}

// Conn is a pool of native-protocol connections to one server. It is safe
// for concurrent use.
type Conn struct {
	server   Server
	db       driver.Conn
	version  string
	revision uint64
}

// Errors that errors.Is finds in this package's errors.
var (
	// ErrNoTable means the table, or its database, does not exist.
	ErrNoTable = errors.New("table does not exist")
	// ErrNoPartition means the table has no active part in the partition.
	ErrNoPartition = errors.New("partition has no active parts")
	// ErrIncompatible means two tables cannot exchange parts.
	ErrIncompatible = errors.New("tables are not compatible")
)

// Error is an error of an operation on one server. Table and Partition are
// empty when the operation concerns no table or partition.
type Error struct {
	Server    string // the server's name
	Op        string // what was being done, as in "replace partition"
	Table     string // "db.table"
	Partition string // partition id
	QueryID   string // the statement's query_id, when it ran one
	Err       error
}

// Error returns "clickhouse SERVER: OP TABLE partition ID (query id QID): ERR",
// leaving out the parts that are empty.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "clickhouse %s: %s", e.Server, e.Op)
	if e.Table != "" {
		fmt.Fprintf(&b, " %s", e.Table)
	}
	if e.Partition != "" {
		fmt.Fprintf(&b, " partition %s", e.Partition)
	}
	if e.QueryID != "" {
		fmt.Fprintf(&b, " (query id %s)", e.QueryID)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Exception codes of ClickHouse this package interprets.
const (
	codeTableAlreadyExists = 57
	codeUnknownTable       = 60
	codeUnknownDatabase    = 81
	codeSameQueryIDRunning = 216 // QUERY_WITH_SAME_ID_IS_ALREADY_RUNNING
)

// connectTimeout bounds the dial when ctx has no earlier deadline.
const connectTimeout = 10 * time.Second

// Connect opens a connection pool to s and checks, with one round trip,
// that the server answers and accepts the credentials.
func Connect(ctx context.Context, s Server) (*Conn, error) {
	if s.Name == "" {
		s.Name = s.Addr
	}
	db, err := ch.Open(&ch.Options{
		Protocol: ch.Native,
		Addr:     []string{s.Addr},
		Auth:     ch.Auth{Username: s.User, Password: s.Password},
		// Settings are sent with every query. 18.16 takes them in the
		// old binary form, which holds integers and booleans only.
		Settings:        ch.Settings{"log_queries": 1},
		DialTimeout:     connectTimeout,
		MaxOpenConns:    8,
		MaxIdleConns:    2,
		ConnMaxLifetime: 10 * time.Minute,
	})
	if err != nil {
		return nil, &Error{Server: s.Name, Op: "connect to " + s.Addr, Err: err}
	}
	c := &Conn{server: s, db: db}
	if err := db.Ping(ctx); err != nil {
		db.Close()
		return nil, &Error{Server: s.Name, Op: "connect to " + s.Addr, Err: err}
	}
	v, err := db.ServerVersion()
	if err != nil {
		db.Close()
		return nil, &Error{Server: s.Name, Op: "connect to " + s.Addr, Err: err}
	}
	c.version = fmt.Sprintf("%d.%d.%d", v.Version.Major, v.Version.Minor, v.Version.Patch)
	c.revision = v.Revision
	return c, nil
}

// Close closes every connection of the pool.
func (c *Conn) Close() error { return c.db.Close() }

// Server returns the server c is connected to.
func (c *Conn) Server() Server { return c.server }

// Version returns the server's version, as in "18.16.1".
func (c *Conn) Version() string { return c.version }

// Revision returns the server's native protocol revision (54412 for 18.16).
func (c *Conn) Revision() uint64 { return c.revision }

// QueryID returns the ClickHouse query_id under which statement op of the
// move (or other caller) qid runs: qid, a colon and op.
func QueryID(qid, op string) string { return qid + ":" + op }

// The ops of QueryID, one per statement this package runs.
const (
	OpReplacePartition = "replace-partition"
	OpAttachPartition  = "attach-partition"
	OpDropPartition    = "drop-partition"
	OpCreateStaging    = "create-staging"
	OpDropTable        = "drop-table"
	OpCopyClear        = "copy-clear"     // CopyPartitionRemote's DROP PARTITION of the destination
	OpCopyPartition    = "copy-partition" // CopyPartitionRemote's INSERT ... SELECT
	OpSyncReplica      = "sync-replica"
)

// fail wraps err as an *Error of c's server, marking unknown tables and
// databases with ErrNoTable.
func (c *Conn) fail(op, table, partition, qid string, err error) error {
	var exc *ch.Exception
	if errors.As(err, &exc) && (exc.Code == codeUnknownTable || exc.Code == codeUnknownDatabase) && !errors.Is(err, ErrNoTable) {
		err = fmt.Errorf("%w: %w", ErrNoTable, err)
	}
	return &Error{Server: c.server.Name, Op: op, Table: table, Partition: partition, QueryID: qid, Err: err}
}

// sameIDPoll is how often exec retries a statement whose query id is
// still running.
const sameIDPoll = 20 * time.Millisecond

// exec runs a statement under query id qid (none when empty). While a
// query with the same id runs on the server, it waits and tries again,
// until ctx ends: the server may still hold the previous run of the same
// statement for a moment after answering it, and a concurrent run of the
// same step (by a recovering process) must finish before this one starts.
func (c *Conn) exec(ctx context.Context, qid, sql string) error {
	if qid == "" {
		return c.db.Exec(ctx, sql)
	}
	qctx := ch.Context(ctx, ch.WithQueryID(qid))
	var tick *time.Ticker
	for {
		err := c.db.Exec(qctx, sql)
		var exc *ch.Exception
		if !errors.As(err, &exc) || exc.Code != codeSameQueryIDRunning {
			return err
		}
		if tick == nil {
			tick = time.NewTicker(sameIDPoll)
			defer tick.Stop()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-tick.C:
		}
	}
}

// selectRows runs a query and calls scan for each row.
func (c *Conn) selectRows(ctx context.Context, query string, scan func(driver.Rows) error) error {
	rows, err := c.db.Query(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

// tableExists reports whether db.table exists.
func (c *Conn) tableExists(ctx context.Context, db, table string) (bool, error) {
	var n uint64
	err := c.db.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = "+quote(db)+" AND name = "+quote(table)).Scan(&n)
	return n > 0, err
}

// mustExist returns an *Error wrapping ErrNoTable unless db.table exists.
func (c *Conn) mustExist(ctx context.Context, op, db, table, partition string) error {
	ok, err := c.tableExists(ctx, db, table)
	if err != nil {
		return c.fail(op, tableName(db, table), partition, "", err)
	}
	if !ok {
		return c.fail(op, tableName(db, table), partition, "", ErrNoTable)
	}
	return nil
}

func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// quote returns s as a ClickHouse string literal.
func quote(s string) string {
	return "'" + literalEscaper.Replace(s) + "'"
}

// ident returns s as a back-quoted ClickHouse identifier.
func ident(s string) string {
	return "`" + identEscaper.Replace(s) + "`"
}

var (
	literalEscaper = strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\x00", `\0`, "\n", `\n`, "\r", `\r`, "\t", `\t`)
	identEscaper   = strings.NewReplacer(`\`, `\\`, "`", "\\`", "\x00", `\0`, "\n", `\n`, "\r", `\r`, "\t", `\t`)
)

// qualified returns db.table as quoted identifiers.
func qualified(db, table string) string { return ident(db) + "." + ident(table) }

// tableName returns db.table as errors show it.
func tableName(db, table string) string { return db + "." + table }

// TableName is a table's database and name.
type TableName struct{ Database, Name string }

// TablesWithPrefix lists the tables of every database whose name starts
// with prefix (staging tables, for audits), by database and name.
func (c *Conn) TablesWithPrefix(ctx context.Context, prefix string) ([]TableName, error) {
	var out []TableName
	err := c.selectRows(ctx, "SELECT database, name FROM system.tables WHERE startsWith(name, "+quote(prefix)+") ORDER BY database, name",
		func(r driver.Rows) error {
			var t TableName
			if err := r.Scan(&t.Database, &t.Name); err != nil {
				return err
			}
			out = append(out, t)
			return nil
		})
	if err != nil {
		return nil, c.fail("list tables named "+prefix+"*", "", "", "", err)
	}
	return out, nil
}

package movepart

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/xkeeper/xkeeper/clickhouse"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Znode directories of the workflow on every shard.
const (
	Root       = "/xkeeper"
	MovesDir   = Root + "/moves"   // one record per move in flight
	LocksDir   = Root + "/locks"   // one lock per table partition being moved
	OwnersDir  = Root + "/owners"  // ephemeral: who drives a move now
	JournalDir = Root + "/journal" // one entry per finished move
)

// Kind is what a workflow does with the source's partition.
type Kind string

const (
	// Move leaves the partition in the destination only.
	Move Kind = "move"
	// Attach copies it: the source keeps its rows (exactly-once copy).
	Attach Kind = "attach"
)

// Step is how far a move has come; the record holds it.
type Step string

// Steps in order. Before StepCommitted a move is rolled back by recovery,
// from it on it is rolled forward.
const (
	StepIntent    Step = "intent"    // records and locks exist; staging may be partial
	StepStaged    Step = "staged"    // staging verified
	StepCommitted Step = "committed" // the commit point: the move will happen
	StepApplied   Step = "applied"   // destination replaced, source dropped, replicas synced
)

// Forward reports whether recovery finishes the move rather than undo it.
func (s Step) Forward() bool { return s == StepCommitted || s == StepApplied }

// TableRef names a ClickHouse table as SERVER:DB.TABLE.
type TableRef struct {
	Server   string `json:"server"`
	Database string `json:"database"`
	Table    string `json:"table"`
}

// ParseTableRef parses "SERVER:DB.TABLE". The first ':' ends the server and
// the first '.' after it ends the database.
func ParseTableRef(s string) (TableRef, error) {
	server, rest, ok := strings.Cut(s, ":")
	db, table, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || server == "" || db == "" || table == "" {
		return TableRef{}, fmt.Errorf("movepart: table %q: want SERVER:DB.TABLE", s)
	}
	return TableRef{Server: server, Database: db, Table: table}, nil
}

// String returns "SERVER:DB.TABLE".
func (t TableRef) String() string { return t.Server + ":" + t.Database + "." + t.Table }

// Endpoint is one table of a move and the keeper shard of its metadata.
type Endpoint struct {
	TableRef
	Shard string `json:"shard"`
	// Parts are the table's active parts in the partition when the move
	// was planned: the same names later mean the same rows.
	Parts []clickhouse.Part `json:"parts,omitempty"`
	// Fingerprint is the partition's content when the move was planned.
	Fingerprint clickhouse.Fingerprint `json:"fingerprint"`
	// ZooKeeperPath is the keeper path of a replicated table (on Shard):
	// the table's identity whichever replica names it, and where the
	// move's part fence keeps every replica from adding parts to the
	// partition (proto.PartFencePath) from the intent to the end.
	ZooKeeperPath string `json:"zookeeper_path,omitempty"`
	// FencePrefix starts the name of every part of the partition.
	FencePrefix string `json:"fence_prefix,omitempty"`
	// LegacySyntax says the table's part names are of the old syntax
	// (clickhouse.ParsePartName).
	LegacySyntax bool `json:"legacy_syntax,omitempty"`
	// MergesChangeRows says the table's merges change its rows
	// (Replacing, Collapsing...): its fingerprint then changes with no
	// row added or lost, and only its parts tell a merge from a change.
	MergesChangeRows bool `json:"merges_change_rows,omitempty"`
}

// lockName returns the name of the endpoint's lock of partition: by keeper
// path for a replicated table, so that every replica names one lock.
func (e Endpoint) lockName(partition string) string {
	if e.ZooKeeperPath != "" {
		return "zk:" + escName(e.ZooKeeperPath) + "@" + escName(partition)
	}
	return LockName(e.TableRef, partition)
}

// Fenced reports whether a part fence keeps rows out of the endpoint's
// partition while its move is in flight (a replicated table).
func (e Endpoint) Fenced() bool { return e.ZooKeeperPath != "" }

// fence returns the znode of the endpoint's part fence, "" for a table
// that is not replicated.
func (e Endpoint) fence() string {
	if e.ZooKeeperPath == "" {
		return ""
	}
	return proto.PartFencePath(e.ZooKeeperPath, e.FencePrefix)
}

// Record is a move in flight, as its znodes on both shards hold it.
type Record struct {
	ID          string    `json:"id"`
	Kind        Kind      `json:"kind"`
	Partition   string    `json:"partition"`
	Source      Endpoint  `json:"source"`
	Destination Endpoint  `json:"destination"`
	Staging     string    `json:"staging"` // table in Destination's database and server
	Step        Step      `json:"step"`
	Started     time.Time `json:"started"`
	LastError   string    `json:"last_error,omitempty"`
	// Driver names the process that took the move over last (empty for
	// its creator). Taking over writes it, which changes the record's
	// versions: every later write of an earlier driver then fails.
	Driver string `json:"driver,omitempty"`
	// Replaced lists the destination's parts right after apply replaced
	// its partition, for a destination whose merges change rows and that
	// no part fence guards: a merge after the REPLACE then still shows
	// the REPLACE done (clickhouse.MergedFrom).
	Replaced []clickhouse.Part `json:"replaced,omitempty"`

	// versions holds the record znode's version on each shard, as last
	// read or written; every update is conditional on it.
	versions map[string]int32
	// ctime is the record znode's creation time in official time (ms).
	ctime int64
	// problem says what is wrong with the record as read (held by only
	// some of its shards).
	problem string
}

// Problem says what is wrong with the record as listed ("" if nothing).
func (r *Record) Problem() string { return r.problem }

// Expected is the fingerprint the destination's partition has once the
// move is applied: the source's rows added to the destination's.
func (r *Record) Expected() clickhouse.Fingerprint {
	return clickhouse.Fingerprint{
		Rows: r.Source.Fingerprint.Rows + r.Destination.Fingerprint.Rows,
		Hash: r.Source.Fingerprint.Hash + r.Destination.Fingerprint.Hash,
	}
}

// Shards lists the shards holding the record: one or two.
func (r *Record) Shards() []string {
	if r.Source.Shard == r.Destination.Shard {
		return []string{r.Source.Shard}
	}
	return []string{r.Source.Shard, r.Destination.Shard}
}

// Created returns when the record was created, in its shard's official time.
func (r *Record) Created() time.Time { return time.UnixMilli(r.ctime) }

// StagingRef names the staging table.
func (r *Record) StagingRef() TableRef {
	return TableRef{Server: r.Destination.Server, Database: r.Destination.Database, Table: r.Staging}
}

// StagingPrefix starts the name of every staging table; the rest is the
// move id without dashes.
const StagingPrefix = "xkeeper_staging_"

// StagingName returns the staging table's name for move id.
func StagingName(id string) string { return StagingPrefix + strings.ReplaceAll(id, "-", "") }

// MoveOfStaging returns the move id a staging table name was made from.
func MoveOfStaging(name string) (string, bool) {
	hex, ok := strings.CutPrefix(name, StagingPrefix)
	if !ok || len(hex) != 32 {
		return "", false
	}
	return hex[0:8] + "-" + hex[8:12] + "-" + hex[12:16] + "-" + hex[16:20] + "-" + hex[20:], true
}

// Lock is the content of a partition lock znode.
type Lock struct {
	Move      string   `json:"move"`
	Table     TableRef `json:"table"`
	Partition string   `json:"partition"`
}

// LockName returns the lock znode's name for partition of table: the
// table's parts escaped so that no two tables or partitions share one.
func LockName(table TableRef, partition string) string {
	return escName(table.Server) + ":" + escName(table.Database) + "." + escName(table.Table) + "@" + escName(partition)
}

// escName escapes s for a part of a znode name.
func escName(s string) string { return strings.ReplaceAll(url.PathEscape(s), ".", "%2E") }

// JournalEntry is what a shard remembers of a finished move.
type JournalEntry struct {
	Record
	Finished time.Time `json:"finished"`
}

// journalName orders entries by the record's creation: ctime in ms, padded.
func journalName(r *Record) string { return fmt.Sprintf("%013d-%s", r.ctime, r.ID) }

func paths(id string) (record, owner string) { return MovesDir + "/" + id, OwnersDir + "/" + id }

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs are encoded
	}
	return b
}

func decodeRecord(b []byte) (*Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("movepart: bad move record: %w", err)
	}
	return &r, nil
}

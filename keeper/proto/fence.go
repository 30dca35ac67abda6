package proto

import (
	"net/url"
	"strings"
)

// PartFencesDir holds the part fences of ReplicatedMergeTree tables whose
// replication metadata lives on the shard: while a fence exists, no client
// write may add rows to the fenced partition of the table (see
// PartFencePath).
const PartFencesDir = "/xkeeper/fences"

// PartFenceTable returns the znode under PartFencesDir that holds the
// fences of the table whose replication metadata is at tablePath (its
// ZooKeeper path, as in ReplicatedMergeTree('/clickhouse/tables/t', ...)).
func PartFenceTable(tablePath string) string {
	return PartFencesDir + "/" + url.PathEscape(strings.TrimSuffix(tablePath, "/"))
}

// PartFencePath returns the fence of the parts of tablePath whose names
// start with prefix (one partition's): while it exists, a write that adds
// an entry to the table's replication log (tablePath/log/log-N) that would
// bring new rows into the partition, an insert's or a merge's (see
// AddsRows), is refused (ErrLocked). Fetches of existing parts, DROP
// PARTITION and REPLACE PARTITION go on.
func PartFencePath(tablePath, prefix string) string {
	return PartFenceTable(tablePath) + "/" + url.PathEscape(prefix)
}

// addingEntries are the types of replication log entries that add parts
// made of new or changed rows: an insert's part (get), a merge (which a
// Replacing, Collapsing, Summing or Aggregating table's merge changes the
// rows of), a mutation, an attached part.
var addingEntries = map[string]bool{"get": true, "merge": true, "mutate": true, "attach": true}

// AddsRows reports whether data, an entry of a ReplicatedMergeTree
// table's replication log as ClickHouse writes it (four header lines, then
// its type and the part names it works on, a line each), adds a part
// whose name starts with prefix by an insert, a merge, a mutation or an
// attach.
func AddsRows(data []byte, prefix string) bool {
	line := 0
	adding := false
	for l := range strings.Lines(string(data)) {
		l = strings.TrimSpace(l)
		switch {
		case line < 4 && strings.HasPrefix(l, "block_id:"):
			line = 4 // the header ends with the block id
			continue
		case line < 4:
			line++
			continue
		case line == 4:
			adding = addingEntries[l]
		case adding && strings.HasPrefix(l, prefix):
			return true
		}
		line++
	}
	return false
}

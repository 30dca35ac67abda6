package fsm

import (
	"net/url"
	"strings"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Part fences (proto.PartFencePath) keep the rows of one partition of a
// ReplicatedMergeTree table as they are while a partition move reads and
// replaces them: a client write that adds an entry to the table's
// replication log bringing new rows into the partition (an insert through
// any replica, a merge, a mutation) is refused with ErrLocked, which
// ClickHouse answers by failing the insert (its part is rolled back) or
// trying the merge again later. Fetches of parts already committed, and
// the mover's own DROP and REPLACE PARTITION, go on: only the log entries
// that add rows are refused.

// fencing reports whether any part fence exists, cheaply: most shards have
// none, and then no create needs a closer look.
func (s *State) fencing() bool {
	n := s.tree.getWith(&s.probe, proto.PartFencesDir)
	return n != nil && n.NumChildren > 0
}

// fenced reports whether a part fence refuses the txn's create of path
// with data.
func (tx *txn) fenced(path string, data []byte) bool {
	if !tx.fences || !tx.s.fencing() {
		return false
	}
	table, ok := logEntryOf(path)
	if !ok {
		return false
	}
	dir := proto.PartFenceTable(table)
	if tx.get(dir) == nil {
		return false
	}
	found := false
	skip := len(dir) + 1
	tx.s.tree.eachChild(dir, func(n *Node) bool {
		prefix, err := url.PathUnescape(n.Path()[skip:])
		found = err == nil && prefix != "" && proto.AddsRows(data, prefix)
		return !found
	})
	return found
}

// logEntryOf returns TABLE of TABLE/log/log-…, an entry of a
// ReplicatedMergeTree table's replication log.
func logEntryOf(path string) (table string, ok bool) {
	i := strings.LastIndex(path, "/log/")
	if i <= 0 || !strings.HasPrefix(path[i+len("/log/"):], "log-") || strings.Contains(path[i+len("/log/"):], "/") {
		return "", false
	}
	return path[:i], true
}

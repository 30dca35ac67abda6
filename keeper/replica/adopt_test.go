package replica

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/nodelog"
)

// TestMoveToNodeLogKeepsTheMembersEntries moves a one-member shard's log
// of its own (raft-wal, bolt, then a node log in its data directory, as a
// member alone with log_store node keeps) into a node log: the member, started
// on the node log, replays every create from it (it has no snapshot and no
// peer to learn them from) and goes on at the next zxid; the old log is
// gone, and a second move, or one after a crash left old files, changes
// nothing else. A first move cut short before its marker only leaves a
// copy no directory names. A running member's directory is refused, not waited for.
func TestMoveToNodeLogKeepsTheMembersEntries(t *testing.T) {
	for _, store := range []string{LogStoreWAL, LogStoreBolt, LogStoreNode} {
		t.Run(store, func(t *testing.T) {
			m := newSoloMember(t)
			r := m.mustOpen(store)
			const n = 100
			sess, last := createMany(t, r, n)
			_, err := ReadOwnLog(m.dir)
			require.ErrorIs(t, err, ErrMemberRunning)
			require.NoError(t, r.Close())

			own, err := ReadOwnLog(m.dir)
			require.NoError(t, err)
			assert.Equal(t, store, own.Store)
			assert.Equal(t, store == LogStoreNode, own.Own)
			assert.GreaterOrEqual(t, own.Entries, uint64(n))
			node := openNodeLog(t, t.TempDir())
			cutShort(t, m.dir, node) // a first move that crashed before its marker
			moved, err := MoveToNodeLog(m.dir, node)
			require.NoError(t, err)
			assert.Equal(t, own.Entries, moved)

			logID, group, err := NodeLogGroup(m.dir)
			require.NoError(t, err)
			assert.Equal(t, node.ID(), logID)
			assert.ElementsMatch(t, []string{group, "cut-short"}, groupNames(node), "the copy no marker names stays, for prune")
			_, err = os.Stat(filepath.Join(m.dir, walDir))
			assert.ErrorIs(t, err, os.ErrNotExist, "the raft-wal log is removed")
			_, err = os.Stat(filepath.Join(m.dir, ownNodeLogDir))
			assert.ErrorIs(t, err, os.ErrNotExist, "the member's own node log is removed")
			assertNoBoltEntries(t, m.dir)

			// What a crash after the marker leaves: the old log.
			require.NoError(t, os.MkdirAll(filepath.Join(m.dir, walDir), 0o755))
			require.NoError(t, os.MkdirAll(filepath.Join(m.dir, ownNodeLogDir), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(m.dir, ownNodeLogDir, "id"), []byte("the-old-log"), 0o644))
			if store == LogStoreBolt {
				b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(m.dir, boltFile)})
				require.NoError(t, err)
				require.NoError(t, b.StoreLog(&raft.Log{Index: 1, Term: 1, Data: []byte("old")}))
				require.NoError(t, b.Close())
			}
			moved, err = MoveToNodeLog(m.dir, node)
			require.NoError(t, err)
			assert.Zero(t, moved)
			_, err = os.Stat(filepath.Join(m.dir, walDir))
			assert.ErrorIs(t, err, os.ErrNotExist, "a second move removes what the first left")
			_, err = os.Stat(filepath.Join(m.dir, ownNodeLogDir))
			assert.ErrorIs(t, err, os.ErrNotExist, "and a node log of its own")
			assertNoBoltEntries(t, m.dir)

			m.node = node
			requireReplayed(t, m.mustOpen(""), sess, n, last)
		})
	}
}

// cutShort copies dir's log into group "cut-short" of node, as a move
// that crashed before writing its marker did.
func cutShort(t *testing.T, dir string, node *nodelog.Log) {
	m, err := openMoving(dir)
	require.NoError(t, err)
	defer m.close()
	first, last, err := m.tail()
	require.NoError(t, err)
	require.NoError(t, copyLog(m.log, node, "cut-short", first, last))
}

// TestMoveToNodeLogTakesTheTailAfterAGap: a bolt log that starts past 1
// and has a gap (raft-boltdb keeps entries below an installed snapshot) is
// refused while no snapshot covers the gap, and then moved from the entry
// after the gap on, entry for entry; raft.db keeps no entry.
func TestMoveToNodeLogTakesTheTailAfterAGap(t *testing.T) {
	dir := t.TempDir()
	b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, boltFile)})
	require.NoError(t, err)
	var logs []*raft.Log
	for i := uint64(5); i <= 100; i++ {
		if i <= 40 || i >= 60 {
			logs = append(logs, &raft.Log{Index: i, Term: 2, Type: raft.LogCommand, Data: []byte(fmt.Sprint("entry ", i))})
		}
	}
	require.NoError(t, b.StoreLogs(logs))
	require.NoError(t, b.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, logStoreMarker), []byte("bolt\n"), 0o644))
	node := openNodeLog(t, t.TempDir())

	_, err = MoveToNodeLog(dir, node)
	require.ErrorContains(t, err, "no snapshot covers the entries before 60")
	own, err := ReadOwnLog(dir)
	require.ErrorContains(t, err, "no snapshot covers", "the dry run says so too: %+v", own)

	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	require.NoError(t, err)
	sink, err := snaps.Create(raft.SnapshotVersionMax, 59, 2, raft.Configuration{}, 1, nil)
	require.NoError(t, err)
	require.NoError(t, sink.Close())
	moved, err := MoveToNodeLog(dir, node)
	require.NoError(t, err)
	assert.Equal(t, uint64(41), moved)
	_, group, err := NodeLogGroup(dir)
	require.NoError(t, err)
	g, err := node.Group(group)
	require.NoError(t, err)
	defer g.Close()
	first, last, err := span(g)
	require.NoError(t, err)
	assert.Equal(t, []uint64{60, 100}, []uint64{first, last})
	var l raft.Log
	require.NoError(t, g.GetLog(77, &l))
	assert.Equal(t, "entry 77", string(l.Data))
	assertNoBoltEntries(t, dir)
}

// TestMoveToNodeLogLeavesOthersAlone: a directory never started is only
// reported (no raft.db appears in it), and one whose log is in another
// node log is refused and keeps its marker.
func TestMoveToNodeLogLeavesOthersAlone(t *testing.T) {
	fresh := t.TempDir()
	own, err := ReadOwnLog(fresh)
	require.NoError(t, err)
	assert.Empty(t, own.Store)
	moved, err := MoveToNodeLog(fresh, openNodeLog(t, t.TempDir()))
	require.NoError(t, err)
	assert.Zero(t, moved)
	entries, err := os.ReadDir(fresh)
	require.NoError(t, err)
	assert.Empty(t, entries, "looking created nothing")

	m := newSoloMember(t)
	m.node = openNodeLog(t, t.TempDir())
	r := m.mustOpen("")
	createMany(t, r, 3)
	require.NoError(t, r.Close())
	marker, err := os.ReadFile(filepath.Join(m.dir, logStoreMarker))
	require.NoError(t, err)
	_, err = MoveToNodeLog(m.dir, openNodeLog(t, t.TempDir()))
	require.ErrorContains(t, err, "keeps its Raft log in node log "+m.node.ID())
	after, err := os.ReadFile(filepath.Join(m.dir, logStoreMarker))
	require.NoError(t, err)
	assert.Equal(t, string(marker), string(after))
}

// groupNames lists the groups node holds entries of.
func groupNames(node *nodelog.Log) []string {
	var names []string
	for _, g := range node.Groups() {
		if g.Last > 0 {
			names = append(names, g.Name)
		}
	}
	return names
}

// assertNoBoltEntries checks that dir's raft.db holds no log entry.
func assertNoBoltEntries(t *testing.T, dir string) {
	b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, boltFile)})
	require.NoError(t, err)
	defer b.Close()
	last, err := b.LastIndex()
	require.NoError(t, err)
	assert.Zero(t, last, "raft.db keeps no entry of the moved log")
}

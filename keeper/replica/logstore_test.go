package replica

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/nodelog"
	"github.com/xkeeper/xkeeper/keeper/peerlink"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// soloMember is a one-member shard on a data directory that the tests
// open, close and reopen.
type soloMember struct {
	t    *testing.T
	dir  string
	peer Peer
	node *nodelog.Log // the node log it opens with, if any
}

func newSoloMember(t *testing.T) *soloMember {
	return &soloMember{t: t, dir: t.TempDir(), peer: Peer{ID: "m1", RaftAddr: freeAddr(t)}}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// open starts the member with fsync on and the given log store; it is
// closed when the test ends.
func (m *soloMember) open(store string) (*Replica, error) {
	return m.openWith(func(c *Config) { c.LogStore = store })
}

// openWith is open with the configuration adjusted by adjust.
func (m *soloMember) openWith(adjust func(*Config)) (*Replica, error) {
	auth, err := peerlink.New(peerlink.Config{Secret: "logstore-test"}, nil)
	require.NoError(m.t, err)
	cfg := Config{
		ID: m.peer.ID, DataDir: m.dir, Peers: []Peer{m.peer}, Fsync: true, Bootstrap: true,
		HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond,
		LeaderLeaseTimeout: 50 * time.Millisecond, CommitTimeout: time.Millisecond,
		SnapshotThreshold: 1 << 30, SnapshotInterval: time.Hour, // every entry stays in the log
		NodeLog: m.node, Auth: auth, Logger: slog.New(slog.NewTextHandler(m.t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	adjust(&cfg)
	r, err := Open(cfg)
	if err == nil {
		m.t.Cleanup(func() { r.Close() })
	}
	return r, err
}

// mustOpen opens the member and waits until it leads.
func (m *soloMember) mustOpen(store string) *Replica {
	r, err := m.open(store)
	require.NoError(m.t, err)
	require.Eventually(m.t, r.IsLeader, 10*time.Second, 10*time.Millisecond, "no leader")
	return r
}

func session(t *testing.T, r *Replica) int64 {
	res := r.Do(fsm.Request{Member: r.ID(), Op: proto.OpCreateSession,
		Body: proto.Marshal(&fsm.CreateSession{Timeout: 30000, Passwd: make([]byte, proto.PasswordLen)})})
	require.Equal(t, proto.ErrOK, res.Err)
	return res.Session
}

// create creates path, one Raft entry of its own, and returns its zxid.
func create(t *testing.T, r *Replica, sess int64, path string) int64 {
	res := r.Do(fsm.Request{Session: sess, Member: r.ID(), Op: proto.OpCreate,
		Body: proto.Marshal(&proto.CreateRequest{Path: path, Data: []byte(path), ACL: proto.WorldACL(proto.PermAll)})})
	require.Equal(t, proto.ErrOK, res.Err, "create %s", path)
	return res.Zxid
}

// waitZxid waits until the member has applied zxid (a restarted member
// replays its log once it leads).
func waitZxid(t *testing.T, r *Replica, zxid int64) {
	require.True(t, r.WaitZxid(zxid, 10*time.Second), "zxid %d not applied", zxid)
}

func nodePaths(r *Replica, n int) (present, absent []string) {
	r.View(func(st *fsm.State) {
		for i := range n {
			p := fmt.Sprintf("/n%03d", i)
			if st.Node(p) != nil {
				present = append(present, p)
			} else {
				absent = append(absent, p)
			}
		}
	})
	return present, absent
}

func TestWALRestartKeepsCommittedEntries(t *testing.T) {
	m := newSoloMember(t)
	r := m.mustOpen(LogStoreWAL)
	const n = 100
	sess, last := createMany(t, r, n)
	require.NoError(t, r.Close())

	marker, err := os.ReadFile(filepath.Join(m.dir, logStoreMarker))
	require.NoError(t, err)
	assert.Equal(t, "wal\n", string(marker))
	segments, err := filepath.Glob(filepath.Join(m.dir, walDir, "*.wal"))
	require.NoError(t, err)
	assert.NotEmpty(t, segments, "no raft-wal segment under the data directory")

	r = m.mustOpen(LogStoreWAL)
	requireReplayed(t, r, sess, n, last)
}

// requireReplayed checks that the restarted r holds the n creates of
// createMany, last its zxid, and goes on at the next zxid.
func requireReplayed(t *testing.T, r *Replica, sess int64, n int, last int64) {
	t.Helper()
	waitZxid(t, r, last)
	present, absent := nodePaths(r, n)
	assert.Len(t, present, n)
	assert.Empty(t, absent)
	r.View(func(st *fsm.State) { assert.Equal(t, last, st.Zxid()) })
	assert.Equal(t, last+1, create(t, r, sess, "/after-restart"))
}

// createMany opens a session and creates /n000 to /n(n-1) in it; it
// returns the session and the zxid of the last create.
func createMany(t *testing.T, r *Replica, n int) (sess, last int64) {
	sess = session(t, r)
	for i := range n {
		last = create(t, r, sess, fmt.Sprintf("/n%03d", i))
	}
	return sess, last
}

// openNodeLog opens a node log in dir, closed when the test ends.
func openNodeLog(t *testing.T, dir string) *nodelog.Log {
	l, err := nodelog.Open(dir, nodelog.Options{Fsync: true})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

func TestNodeLogRestartKeepsCommittedEntries(t *testing.T) {
	m := newSoloMember(t)
	logDir := t.TempDir()
	m.node = openNodeLog(t, logDir)
	r := m.mustOpen("") // a new data directory on a node keeps its log in the node's
	const n = 100
	sess, last := createMany(t, r, n)
	require.NoError(t, r.Close())
	require.NoError(t, m.node.Close())
	marker, err := os.ReadFile(filepath.Join(m.dir, logStoreMarker))
	require.NoError(t, err)
	assert.Regexp(t, "^node "+m.node.ID()+" [0-9a-f-]{36}\n$", string(marker))
	_, err = os.Stat(filepath.Join(m.dir, walDir))
	assert.ErrorIs(t, err, os.ErrNotExist, "no raft-wal beside the node log")

	m.node = openNodeLog(t, logDir)
	r = m.mustOpen("")
	requireReplayed(t, r, sess, n, last)
	require.NoError(t, r.Close())

	m.node = openNodeLog(t, t.TempDir())
	_, err = m.open("")
	assert.ErrorContains(t, err, "the member ran elsewhere", "another node log would lack the member's entries")
	m.node = nil
	_, err = m.open("")
	assert.ErrorContains(t, err, "the member ran elsewhere", "nor would a log of its own")
}

func TestMemberAloneKeepsANodeLogOfItsOwn(t *testing.T) {
	m := newSoloMember(t)
	r := m.mustOpen(LogStoreNode)
	sess := session(t, r)
	last := create(t, r, sess, "/alone")
	require.NoError(t, r.Close())
	_, err := os.Stat(filepath.Join(m.dir, ownNodeLogDir, "id"))
	require.NoError(t, err, "the member's own node log")
	r = m.mustOpen("")
	waitZxid(t, r, last)
	r.View(func(st *fsm.State) { assert.NotNil(t, st.Node("/alone"), "the create, from the member's own node log") })
}

func TestWALTornTailRestartsWithoutTheTornEntry(t *testing.T) {
	m := newSoloMember(t)
	r := m.mustOpen(LogStoreWAL)
	sess := session(t, r)
	const n = 20
	zxids := make([]int64, n)
	for i := range n {
		zxids[i] = create(t, r, sess, fmt.Sprintf("/n%03d", i))
	}
	require.NoError(t, r.Close())

	// The last create is the log's last entry, alone in the last append:
	// cut its frame in half, as a crash in the middle of the write would.
	tearLastEntry(t, filepath.Join(m.dir, walDir))

	r, err := m.open(LogStoreWAL)
	require.NoError(t, err, "restart on a torn tail")
	require.Eventually(t, r.IsLeader, 10*time.Second, 10*time.Millisecond, "no leader")
	waitZxid(t, r, zxids[n-2])
	present, absent := nodePaths(r, n)
	assert.Len(t, present, n-1)
	assert.Equal(t, []string{fmt.Sprintf("/n%03d", n-1)}, absent, "the torn entry")
	r.View(func(st *fsm.State) { assert.Equal(t, zxids[n-2], st.Zxid()) })
	// The log goes on where the torn entry was.
	assert.Equal(t, zxids[n-2]+1, create(t, r, sess, fmt.Sprintf("/n%03d", n-1)))
	require.NoError(t, r.Close())
	r = m.mustOpen(LogStoreWAL)
	waitZxid(t, r, zxids[n-2]+1)
	present, _ = nodePaths(r, n)
	assert.Len(t, present, n)
}

// tearLastEntry truncates the last raft-wal segment file in dir in the
// middle of its last entry frame (raft-wal's format: a 32-byte file
// header, then frames of an 8-byte header — type, 3 reserved bytes, a
// little-endian length, or a CRC for commit frames — and the payload
// padded to 8 bytes).
func tearLastEntry(t *testing.T, dir string) {
	const (
		fileHeaderLen  = 32
		frameHeaderLen = 8
		frameEntry     = 1
		frameIndex     = 2
		frameCommit    = 3
	)
	segments, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	require.NoError(t, err)
	require.NotEmpty(t, segments)
	slices.Sort(segments) // named by base index, zero-padded
	path := segments[len(segments)-1]
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	lastEntry, lastLen := -1, 0
	for off := fileHeaderLen; off+frameHeaderLen <= len(b); {
		typ, n := b[off], int(binary.LittleEndian.Uint32(b[off+4:off+8]))
		switch typ {
		case frameEntry, frameIndex:
			if typ == frameEntry {
				lastEntry, lastLen = off, n
			}
			off += frameHeaderLen + (n+frameHeaderLen-1)/frameHeaderLen*frameHeaderLen
			continue
		case frameCommit:
			off += frameHeaderLen
			continue
		}
		break // zeros: the end of what was written
	}
	require.GreaterOrEqual(t, lastEntry, 0, "no entry frame in %s", path)
	require.Greater(t, lastLen, 16)
	require.NoError(t, os.Truncate(path, int64(lastEntry+frameHeaderLen+lastLen/2)))
}

func TestLogStoreMismatchRefused(t *testing.T) {
	for _, tc := range []struct{ created, other string }{
		{LogStoreWAL, LogStoreBolt},
		{LogStoreBolt, LogStoreWAL},
	} {
		t.Run(tc.created, func(t *testing.T) {
			m := newSoloMember(t)
			r := m.mustOpen(tc.created)
			zxid := create(t, r, session(t, r), "/n000")
			require.NoError(t, r.Close())

			_, err := m.open(tc.other)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "keeper.log_store")
			assert.Contains(t, err.Error(), fmt.Sprintf("holds a %q Raft log store", tc.created))
			t.Log(err)

			r = m.mustOpen(tc.created) // the refusal changed nothing
			waitZxid(t, r, zxid)
			present, _ := nodePaths(r, 1)
			assert.Len(t, present, 1)
		})
	}
}

// A data directory from before keeper.log_store (raft.db, no marker) holds
// bolt, whatever the default.
func TestUnmarkedDataDirIsBolt(t *testing.T) {
	m := newSoloMember(t)
	r := m.mustOpen(LogStoreBolt)
	zxid := create(t, r, session(t, r), "/n000")
	require.NoError(t, r.Close())
	require.NoError(t, os.Remove(filepath.Join(m.dir, logStoreMarker)))

	_, err := m.open(LogStoreWAL)
	require.ErrorContains(t, err, `holds a "bolt" Raft log store but keeper.log_store is "wal"`)
	// Unset, the setting follows the data directory: upgrades need no edit.
	r = m.mustOpen("")
	waitZxid(t, r, zxid)
	present, _ := nodePaths(r, 1)
	assert.Len(t, present, 1)
	marker, err := os.ReadFile(filepath.Join(m.dir, logStoreMarker))
	require.NoError(t, err)
	assert.Equal(t, "bolt\n", string(marker), "the marker is written on the first start that lacks it")
}

func TestLogStoreConfig(t *testing.T) {
	d := config.Default()
	assert.Empty(t, d.LogStore, "unset: a data directory's own store, wal for a new one")
	assert.True(t, d.Fsync, "fsync is on unless a test turns it off")
	assert.Equal(t, DefaultLogStore, logStoreName("", "", nil))
	assert.Equal(t, LogStoreBolt, logStoreName("", LogStoreBolt, nil))
	assert.Equal(t, LogStoreWAL, logStoreName(LogStoreWAL, LogStoreBolt, nil))
	node := &nodelog.Log{}
	assert.Equal(t, LogStoreNode, logStoreName("", "", node), "a new data directory on a node")
	assert.Equal(t, LogStoreWAL, logStoreName("", LogStoreWAL, node), "an old one keeps its store")

	ports := make([]int, 2)
	for i := range ports {
		ports[i] = 30000 + i
	}
	for _, store := range []string{"", LogStoreBolt, LogStoreWAL} {
		k := config.Default()
		k.LogStore = store
		c, err := config.Layout(t.TempDir(), 1, 1, ports, k)
		require.NoError(t, err)
		assert.NoError(t, c.Validate(), "log_store %q", store)
	}
	k := config.Default()
	k.LogStore = "rocks"
	_, err := config.Layout(t.TempDir(), 1, 1, ports, k)
	require.ErrorContains(t, err, `config: keeper.log_store: must be wal, node or bolt, got "rocks"`)
}

// TestTruncatedTailSurvivesRestart deletes a suffix of a WAL log, as a
// follower does with a deposed leader's uncommitted entries, appends the
// new leader's entries and reopens the store: every entry reads back, the
// new ones and not the deleted ones. raft-wal v0.4.0 alone cannot reopen
// such a log (see truncationSealedFiler).
func TestTruncatedTailSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	open := func() *stores {
		st, err := openStores(Config{DataDir: dir, Fsync: true, LogStore: LogStoreWAL}, nil)
		require.NoError(t, err)
		return st
	}
	entries := func(term, from, to uint64) []*raft.Log {
		var out []*raft.Log
		for i := from; i <= to; i++ {
			out = append(out, &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: fmt.Appendf(nil, "t%d-%d", term, i)})
		}
		return out
	}

	st := open()
	require.NoError(t, st.log.StoreLogs(entries(1, 1, 10)))
	require.NoError(t, st.log.DeleteRange(8, 10)) // the deposed leader's suffix
	require.NoError(t, st.log.StoreLogs(entries(2, 8, 12)))
	closeAll(t, st)

	st = open()
	defer closeAll(t, st)
	last, err := st.log.LastIndex()
	require.NoError(t, err)
	assert.Equal(t, uint64(12), last)
	for i := uint64(1); i <= 12; i++ {
		var l raft.Log
		require.NoError(t, st.log.GetLog(i, &l), "entry %d after the restart", i)
		term := uint64(1)
		if i >= 8 {
			term = 2
		}
		assert.Equal(t, fmt.Sprintf("t%d-%d", term, i), string(l.Data), "entry %d", i)
	}
	require.NoError(t, st.log.StoreLogs(entries(2, 13, 13)), "the reopened log takes the next entry")
}

// TestStableStoreIgnoresWritesOnceClosed: a term or vote write that fails
// because the member closed is ignored (raft would panic on it, taking the
// process down); one made while open goes to bolt.
func TestStableStoreIgnoresWritesOnceClosed(t *testing.T) {
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), boltFile)})
	require.NoError(t, err)
	s := &stableStore{StableStore: bolt, db: bolt}
	require.NoError(t, s.SetUint64([]byte("CurrentTerm"), 1))
	term, err := s.GetUint64([]byte("CurrentTerm"))
	require.NoError(t, err)
	require.Equal(t, uint64(1), term)
	require.NoError(t, s.Close())
	require.Error(t, bolt.SetUint64([]byte("CurrentTerm"), 2), "bolt itself refuses once closed")
	assert.NoError(t, s.SetUint64([]byte("CurrentTerm"), 2))
	assert.NoError(t, s.Set([]byte("LastVoteCand"), []byte("a2")))
}

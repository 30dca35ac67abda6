package replica

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/hashicorp/raft-wal/metadb"
	bbolt "go.etcd.io/bbolt"

	"github.com/xkeeper/xkeeper/keeper/nodelog"
)

// OwnLog says where a stopped member's data directory keeps its Raft log.
type OwnLog struct {
	// Store is LogStoreWAL or LogStoreBolt for a log of its own,
	// LogStoreNode for a group of a node log, "" for a directory that has
	// chosen none (a member never started).
	Store string
	// LogID is the identity of the node log, for LogStoreNode.
	LogID string
	// Own says that that node log is the member's own, in its data
	// directory (it ran alone with keeper.log_store: node): a move takes
	// it too.
	Own bool
	// Entries is how many entries of a log of its own a move takes.
	Entries uint64
}

// ErrMemberRunning is returned for a data directory whose member runs.
var ErrMemberRunning = errors.New("replica: the member of this data directory is running (its raft.db is locked)")

// ReadOwnLog says where the stopped member of dir keeps its Raft log, and
// how many entries a move would take from a log of its own.
func ReadOwnLog(dir string) (OwnLog, error) {
	m, err := openMoving(dir)
	if err != nil {
		return OwnLog{}, err
	}
	defer m.close()
	own := OwnLog{Store: m.store, LogID: m.logID, Own: m.ownNode != nil}
	if m.log != nil {
		first, last, err := m.tail()
		if err != nil {
			return OwnLog{}, err
		}
		own.Entries = count(first, last)
	}
	return own, nil
}

// MoveToNodeLog moves the Raft log of the stopped member of dir from a
// store of its own (raft-wal, bolt, or a node log of its own in dir) into
// a new group of node, and returns how many entries it moved. It holds
// the member's raft.db throughout, so the member cannot start meanwhile.
// The entries are copied and synced first; then the directory's marker
// names the group (from then on the member starts on the node log); then
// the old log is removed (raft-wal's directory, the entries in raft.db,
// which keeps the term and vote, or its own node log's directory). A crash
// before the marker leaves the member on its old log and a group no
// directory names (xkeeper node prune drops it); a crash after it leaves
// old entries that a second call removes. A directory already on node, or
// that has chosen no log, is left as it is; one on another node's log is
// refused.
func MoveToNodeLog(dir string, node *nodelog.Log) (uint64, error) {
	m, err := openMoving(dir)
	if err != nil {
		return 0, err
	}
	defer m.close()
	switch {
	case m.store == LogStoreNode && m.logID != node.ID() && m.ownNode == nil:
		return 0, fmt.Errorf("replica: %s keeps its Raft log in node log %s, not in this node's (%s) nor in one of its own: "+
			"the member ran on another node; start it there", dir, m.logID, node.ID())
	case m.store == LogStoreNode && m.ownNode == nil:
		return 0, m.dropOld() // what a move cut short after its marker left
	case m.log == nil:
		return 0, nil
	}
	first, last, err := m.tail()
	if err != nil {
		return 0, err
	}
	group := uuid.NewString()
	if err := copyLog(m.log, node, group, first, last); err != nil {
		return 0, err
	}
	if err := writeMarker(dir, nodeMarker(node, group)); err != nil {
		return 0, fmt.Errorf("replica: %s: name the node log group: %w", dir, err)
	}
	return count(first, last), m.dropOld()
}

// moving is a stopped member's data directory opened for a move: its
// raft.db held, and its own log store if it has one.
type moving struct {
	dir     string
	store   string                // what the directory's marker names
	logID   string                // the node log's identity, for LogStoreNode
	ownNode *nodelog.Log          // the node log in dir its marker names, if any
	bolt    *raftboltdb.BoltStore // raft.db, nil if the directory has none
	log     raft.LogStore         // the log of its own (bolt, wal or a group of ownNode), if any
	own     []io.Closer           // what log needs closed besides raft.db, last to first
}

// openMoving takes dir's raft.db, failing with ErrMemberRunning if its
// member holds it, and opens its log.
func openMoving(dir string) (_ *moving, err error) {
	m := &moving{dir: dir}
	defer func() {
		if err != nil {
			m.close()
		}
	}()
	path := filepath.Join(dir, boltFile)
	if _, err := os.Stat(path); err == nil { // bolt would create a missing one
		m.bolt, err = raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: 500 * time.Millisecond}})
		if errors.Is(err, bbolt.ErrTimeout) {
			return nil, fmt.Errorf("%w: %s", ErrMemberRunning, dir)
		}
		if err != nil {
			return nil, fmt.Errorf("replica: %s: open %s: %w", dir, boltFile, err)
		}
	}
	if m.store, _, err = dataDirLogStore(dir); err != nil {
		return nil, err
	}
	switch m.store {
	case LogStoreNode:
		var group string
		if m.logID, group, err = NodeLogGroup(dir); err != nil {
			return nil, err
		}
		if m.ownNode, err = openOwnNodeLog(dir, m.logID); err != nil || m.ownNode == nil {
			return m, err
		}
		g, err := m.ownNode.Group(group)
		if err != nil {
			return nil, err
		}
		m.log, m.own = g, []io.Closer{g}
	case LogStoreBolt:
		if m.bolt == nil {
			return nil, fmt.Errorf("replica: %s names a bolt log store but has no %s", dir, boltFile)
		}
		m.log = m.bolt
	case LogStoreWAL:
		meta := &metadb.BoltMetaDB{}
		w, werr := openWAL(filepath.Join(dir, walDir), true, meta, hclog.NewNullLogger())
		if werr != nil {
			meta.Close()
			return nil, fmt.Errorf("replica: %s: open the raft-wal log: %w", dir, werr)
		}
		m.log, m.own = w, []io.Closer{meta, w}
	}
	return m, err
}

// openOwnNodeLog opens the node log in dir if it is the one named logID,
// and returns nil if there is none or it is another.
func openOwnNodeLog(dir, logID string) (*nodelog.Log, error) {
	id, err := nodelog.ReadID(filepath.Join(dir, ownNodeLogDir))
	if errors.Is(err, fs.ErrNotExist) || (err == nil && id != logID) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return nodelog.Open(filepath.Join(dir, ownNodeLogDir), nodelog.Options{Fsync: true})
}

// close closes what openMoving opened, raft.db last.
func (m *moving) close() error {
	err := m.closeOwn()
	if m.bolt != nil {
		err = errors.Join(err, m.bolt.Close())
		m.bolt = nil
	}
	return err
}

// closeOwn closes the log of its own (its closers, then its own node
// log), leaving raft.db open.
func (m *moving) closeOwn() error {
	var err error
	for i := len(m.own) - 1; i >= 0; i-- {
		err = errors.Join(err, m.own[i].Close())
	}
	m.own = nil
	if m.ownNode != nil {
		err = errors.Join(err, m.ownNode.Close())
		m.ownNode = nil
	}
	return err
}

// tail returns the entries a move takes: the last run of the log without
// a gap. raft-wal never has one; raft-boltdb can, after a snapshot was
// installed, below the snapshot's index, which the entries before the gap
// are then covered by.
func (m *moving) tail() (first, last uint64, err error) {
	if first, last, err = span(m.log); err != nil || last == 0 {
		return 0, 0, err
	}
	start := last
	for ; start > first; start-- {
		var l raft.Log
		if err := m.log.GetLog(start-1, &l); errors.Is(err, raft.ErrLogNotFound) {
			break
		} else if err != nil {
			return 0, 0, err
		}
	}
	if start > first {
		snaps, err := raft.NewFileSnapshotStoreWithLogger(m.dir, 2, hclog.NewNullLogger())
		if err != nil {
			return 0, 0, err
		}
		metas, err := snaps.List()
		if err != nil {
			return 0, 0, err
		}
		if len(metas) == 0 || metas[0].Index+1 < start {
			return 0, 0, fmt.Errorf("replica: %s: the Raft log has no entry %d, and no snapshot covers the entries before %d", m.dir, start-1, start)
		}
	}
	return start, last, nil
}

// dropOld removes the log of its own that the directory kept before its
// marker named a node log group: raft-wal's directory, a node log of its
// own that the marker no longer names, and the entries in raft.db, in
// steps (bolt keeps the file's size; the space is reused).
func (m *moving) dropOld() error {
	if err := m.closeOwn(); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(m.dir, walDir)); err != nil {
		return fmt.Errorf("replica: %s: remove the moved raft-wal log: %w", m.dir, err)
	}
	logID, _, err := NodeLogGroup(m.dir)
	if err != nil {
		return err
	}
	own := filepath.Join(m.dir, ownNodeLogDir)
	if id, err := nodelog.ReadID(own); err == nil && id != logID {
		if err := os.RemoveAll(own); err != nil {
			return fmt.Errorf("replica: %s: remove the moved node log: %w", m.dir, err)
		}
	}
	if m.bolt == nil {
		return nil
	}
	first, last, err := span(m.bolt)
	const step = 8192
	for lo := first; err == nil && last > 0 && lo <= last; lo += step {
		err = m.bolt.DeleteRange(lo, min(last, lo+step-1))
	}
	if err != nil {
		return fmt.Errorf("replica: %s: remove the moved entries from %s: %w", m.dir, boltFile, err)
	}
	return nil
}

// copyLog copies entries first to last of from into group of node, and
// checks that the group then holds exactly them, entry by entry.
func copyLog(from raft.LogStore, node *nodelog.Log, group string, first, last uint64) error {
	g, err := node.Group(group)
	if err != nil {
		return err
	}
	defer g.Close()
	const chunk = 512
	for lo := first; last > 0 && lo <= last; lo += chunk {
		logs := make([]*raft.Log, 0, chunk)
		for i := lo; i <= min(last, lo+chunk-1); i++ {
			l := new(raft.Log)
			if err := from.GetLog(i, l); err != nil {
				return fmt.Errorf("replica: read entry %d of the old log: %w", i, err)
			}
			logs = append(logs, l)
		}
		if err := g.StoreLogs(logs); err != nil {
			return fmt.Errorf("replica: copy entries %d-%d into the node log: %w", lo, logs[len(logs)-1].Index, err)
		}
		for _, a := range logs { // read back what was stored
			var b raft.Log
			if err := g.GetLog(a.Index, &b); err != nil {
				return fmt.Errorf("replica: check entry %d of the copy: %w", a.Index, err)
			}
			if a.Index != b.Index || a.Term != b.Term || a.Type != b.Type || string(a.Data) != string(b.Data) || string(a.Extensions) != string(b.Extensions) {
				return fmt.Errorf("replica: entry %d of the node log group differs from the old log's", a.Index)
			}
		}
	}
	gfirst, glast, err := span(g)
	if err != nil {
		return err
	}
	if gfirst != first || glast != last {
		return fmt.Errorf("replica: the node log group holds entries %d-%d after copying %d-%d", gfirst, glast, first, last)
	}
	return nil
}

// span returns the first and last index of a log store, 0 and 0 if empty.
func span(s raft.LogStore) (first, last uint64, err error) {
	if first, err = s.FirstIndex(); err != nil {
		return 0, 0, err
	}
	last, err = s.LastIndex()
	return first, last, err
}

func count(first, last uint64) uint64 {
	if last == 0 {
		return 0
	}
	return last - first + 1
}

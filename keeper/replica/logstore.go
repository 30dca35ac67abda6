package replica

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"

	"github.com/xkeeper/xkeeper/keeper/nodelog"
)

// The log stores a member can keep its Raft log in (Config.LogStore,
// keeper.log_store). The stable store (current term, vote) is raft-boltdb
// in DATA_DIR/raft.db with either.
const (
	// LogStoreBolt keeps the log in raft-boltdb, in DATA_DIR/raft.db beside
	// the stable store: two fdatasyncs per append.
	LogStoreBolt = "bolt"
	// LogStoreWAL keeps the log in hashicorp/raft-wal's append-only segment
	// files under DATA_DIR/wal: one fdatasync per append.
	LogStoreWAL = "wal"
	// LogStoreNode keeps the log in the node's log (Config.NodeLog,
	// package nodelog), shared with the members of other shards the
	// process hosts: one fdatasync per batch for all of them.
	LogStoreNode = "node"
	// DefaultLogStore is the log store of a new data directory when
	// Config.LogStore is empty and the member has no node log; with one,
	// it is LogStoreNode. An existing directory keeps the store it holds.
	DefaultLogStore = LogStoreWAL
)

const (
	logStoreMarker = "log_store" // DATA_DIR/log_store names the data directory's log store
	boltFile       = "raft.db"
	walDir         = "wal"
)

// logStoreName returns the configured log store; empty means the one the
// data directory already holds (found), or the default for a new one:
// the node's log if the member has one.
func logStoreName(s, found string, node *nodelog.Log) string {
	if node != nil {
		return cmp.Or(s, found, LogStoreNode)
	}
	return cmp.Or(s, found, DefaultLogStore)
}

// stores are a member's Raft log and stable stores.
type stores struct {
	log     raft.LogStore
	stable  raft.StableStore
	node    *nodelog.Log // the node log that holds log, if it is one
	closers []io.Closer
}

// openStores opens the stores of cfg.DataDir: the stable store in bolt and
// the log store cfg.LogStore names. A new data directory records its log
// store first; one that holds the other store is refused.
func openStores(cfg Config, log hclog.Logger) (*stores, error) {
	found, _, err := dataDirLogStore(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	want := logStoreName(cfg.LogStore, found, cfg.NodeLog)
	if want != LogStoreBolt && want != LogStoreWAL && want != LogStoreNode {
		return nil, fmt.Errorf("replica: unknown log store %q (keeper.log_store: %s, %s or %s)", cfg.LogStore, LogStoreWAL, LogStoreNode, LogStoreBolt)
	}
	node := cfg.NodeLog
	var own io.Closer
	if want == LogStoreNode && node == nil {
		// A member alone keeps a node log of its own.
		if node, err = nodelog.Open(filepath.Join(cfg.DataDir, ownNodeLogDir), nodelog.Options{Fsync: cfg.Fsync, Logger: cfg.Logger}); err != nil {
			return nil, fmt.Errorf("replica: open log store: %w", err)
		}
		own = node
	}
	s, err := openStoresWith(cfg, want, node, log)
	if err != nil && own != nil {
		own.Close()
	}
	if err == nil && own != nil {
		s.closers = slices.Insert(s.closers, 1, own) // after the group, before the stable store
	}
	return s, err
}

// ownNodeLogDir is the node log of a member that runs alone, in its data
// directory.
const ownNodeLogDir = "nodelog"

// openStoresWith opens the stable store and the log store want of
// cfg.DataDir; node is the node log, for LogStoreNode.
func openStoresWith(cfg Config, want string, node *nodelog.Log, log hclog.Logger) (*stores, error) {
	if err := claimLogStore(cfg.DataDir, want, node); err != nil {
		return nil, err
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(cfg.DataDir, boltFile), NoSync: !cfg.Fsync})
	if err != nil {
		return nil, fmt.Errorf("replica: open stable store: %w", err)
	}
	// raft.db is the data directory's lock: a log move (MoveToNodeLog)
	// holds it, so the marker read before it may have changed meanwhile.
	if again, _, err := dataDirLogStore(cfg.DataDir); err != nil || again != want {
		bolt.Close()
		return nil, errors.Join(err, fmt.Errorf("replica: data directory %s now keeps its Raft log in %q, not %q: "+
			"its log was moved (xkeeper node adopt) while the member started; start it again", cfg.DataDir, again, want))
	}
	stable := &stableStore{StableStore: bolt, db: bolt}
	s := &stores{log: bolt, stable: stable, closers: []io.Closer{stable}}
	switch want {
	case LogStoreWAL:
		// WAL.Close leaves its meta store (a bolt file, locked while open)
		// open, so the replica closes it after the WAL: otherwise a member
		// reopened in the same process would wait for the lock forever.
		meta := &metadb.BoltMetaDB{}
		w, err := openWAL(filepath.Join(cfg.DataDir, walDir), cfg.Fsync, meta, log)
		if err != nil {
			meta.Close()
			bolt.Close()
			return nil, fmt.Errorf("replica: open log store: %w", err)
		}
		s.log = w
		s.closers = append(s.closers, meta, w) // closed last to first
	case LogStoreNode:
		g, err := openNodeGroup(cfg.DataDir, node)
		if err != nil {
			bolt.Close()
			return nil, err
		}
		s.log, s.node = g, node
		s.closers = append(s.closers, g)
	}
	return s, nil
}

// nodeMarker is a data directory's log store marker when its log is in a
// node's log: "node", the node log's identity and the group the member's
// entries go to there, a name new with the data directory.
func nodeMarker(log *nodelog.Log, group string) string {
	return LogStoreNode + " " + log.ID() + " " + group
}

// writeMarker records dir's log store marker, durably.
func writeMarker(dir, marker string) error {
	return nodelog.WriteFile(filepath.Join(dir, logStoreMarker), []byte(marker+"\n"))
}

// openNodeGroup opens the member's group in the node's log, which must be
// the log the data directory recorded.
func openNodeGroup(dir string, log *nodelog.Log) (*nodelog.Store, error) {
	logID, group, err := NodeLogGroup(dir)
	if err != nil {
		return nil, err
	}
	if logID == "" {
		return nil, fmt.Errorf("replica: %s names no node log", filepath.Join(dir, logStoreMarker))
	}
	if logID != log.ID() {
		return nil, fmt.Errorf("replica: data directory %s keeps its Raft log in node log %s, but the node log here is %s: "+
			"the member ran elsewhere (on a node, or alone) and its log would be missing; start it where it ran", dir, logID, log.ID())
	}
	return log.Group(group)
}

// NodeLogGroup reads, from a member's data directory, the node log that
// keeps its Raft log (its identity) and its group there; both are "" for a
// directory whose log is elsewhere (raft-wal, bolt). The error wraps
// fs.ErrNotExist for a directory that has not chosen its log store (a
// member never started there) or is missing.
func NodeLogGroup(dir string) (logID, group string, err error) {
	path := filepath.Join(dir, logStoreMarker)
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 || fields[0] != LogStoreNode {
		return "", "", nil
	}
	if len(fields) != 3 {
		return "", "", fmt.Errorf("replica: %s: a node log marker needs the log's identity and a group", path)
	}
	return fields[1], fields[2], nil
}

// openWAL opens (or creates) the raft-wal log in dir. raft-wal always
// fdatasyncs a batch before Append returns; without fsync, for tests only,
// its segment files skip the sync.
func openWAL(dir string, fsync bool, meta types.MetaStore, log hclog.Logger) (*wal.WAL, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var vfs types.VFS = walfs.New()
	if !fsync {
		vfs = noSyncFS{walfs.New()}
	}
	return wal.Open(dir, wal.WithMetaStore(meta), wal.WithLogger(log),
		wal.WithSegmentFiler(truncationSealedFiler{segment.NewFiler(dir, vfs)}))
}

// noSyncFS is raft-wal's file system with Sync a no-op on segment files
// (keeper.fsync false).
type noSyncFS struct{ *walfs.FS }

func (f noSyncFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	w, err := f.FS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return noSyncFile{w}, nil
}

func (f noSyncFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	w, err := f.FS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return noSyncFile{w}, nil
}

type noSyncFile struct{ types.WritableFile }

func (noSyncFile) Sync() error { return nil }

// claimLogStore checks that dir holds the log store want, or none yet, and
// records want in dir's marker file when it is not recorded: for the
// node's log (node, the member's), with the log's identity and a new
// group.
func claimLogStore(dir, want string, node *nodelog.Log) error {
	found, marked, err := dataDirLogStore(dir)
	if err != nil {
		return err
	}
	if found != "" && found != want {
		return fmt.Errorf("replica: data directory %s holds a %q Raft log store but keeper.log_store is %q: "+
			"set keeper.log_store: %s (or XKEEPER_KEEPER_LOG_STORE=%s for this member); "+
			"a data directory keeps the log store it was created with",
			dir, found, want, found, found)
	}
	if marked {
		return nil
	}
	marker := want
	if want == LogStoreNode {
		marker = nodeMarker(node, uuid.NewString())
	}
	if err := writeMarker(dir, marker); err != nil {
		return fmt.Errorf("replica: record the log store: %w", err)
	}
	return nil
}

// dataDirLogStore reads dir's marker file; marked says whether it exists.
func dataDirLogStore(dir string) (found string, marked bool, err error) {
	path := filepath.Join(dir, logStoreMarker)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		found, _, _ = strings.Cut(strings.TrimSpace(string(b)), " ")
		if found != LogStoreBolt && found != LogStoreWAL && found != LogStoreNode {
			return "", false, fmt.Errorf("replica: %s names an unknown log store %q", path, found)
		}
		return found, true, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", false, fmt.Errorf("replica: read the log store marker: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, walDir)); err == nil {
		return LogStoreWAL, false, nil
	}
	if _, err := os.Stat(filepath.Join(dir, boltFile)); err == nil {
		return LogStoreBolt, false, nil
	}
	return "", false, nil
}

// stableStore is the stable store (raft's term and vote) that ignores a
// write that fails because it closed. raft panics when it cannot save its
// term, and it can still be handling a request of a higher term when the
// member closes: its main loop picks at random between a waiting request
// and shutdown (before heartbeats went through the main loop, the
// transport handled them on its own goroutine, checking for shutdown
// before, not after; seen once: "failed to save current term: database
// not open", which took the whole process down, every member of a node
// with it). Ignoring the write is safe because the replica closes the
// transport, and so every link, before this store (closeStores): no answer
// made on the ignored write can reach a peer.
type stableStore struct {
	raft.StableStore
	db     io.Closer
	closed atomic.Bool
}

func (s *stableStore) Set(key, val []byte) error {
	return s.ignoreClosed(s.StableStore.Set(key, val))
}

func (s *stableStore) SetUint64(key []byte, val uint64) error {
	return s.ignoreClosed(s.StableStore.SetUint64(key, val))
}

func (s *stableStore) ignoreClosed(err error) error {
	if err != nil && s.closed.Load() {
		return nil
	}
	return err
}

// Close marks the store closed, then closes it.
func (s *stableStore) Close() error {
	s.closed.Store(true)
	return s.db.Close()
}

package replica

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
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
	// DefaultLogStore is the log store of a new data directory when
	// Config.LogStore is empty; an existing one keeps the store it holds.
	DefaultLogStore = LogStoreWAL
)

const (
	logStoreMarker = "log_store" // DATA_DIR/log_store names the data directory's log store
	boltFile       = "raft.db"
	walDir         = "wal"
)

// logStoreName returns the configured log store; empty means the one the
// data directory already holds (found), or the default for a new one.
func logStoreName(s, found string) string {
	return cmp.Or(s, found, DefaultLogStore)
}

// stores are a member's Raft log and stable stores.
type stores struct {
	log     raft.LogStore
	stable  raft.StableStore
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
	want := logStoreName(cfg.LogStore, found)
	if want != LogStoreBolt && want != LogStoreWAL {
		return nil, fmt.Errorf("replica: unknown log store %q (keeper.log_store: %s or %s)", cfg.LogStore, LogStoreBolt, LogStoreWAL)
	}
	if err := claimLogStore(cfg.DataDir, want); err != nil {
		return nil, err
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(cfg.DataDir, boltFile), NoSync: !cfg.Fsync})
	if err != nil {
		return nil, fmt.Errorf("replica: open stable store: %w", err)
	}
	s := &stores{log: bolt, stable: bolt, closers: []io.Closer{bolt}}
	if want == LogStoreWAL {
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
	}
	return s, nil
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
// records want in dir's marker file when it is not recorded.
func claimLogStore(dir, want string) error {
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
	if err := writeFileSync(filepath.Join(dir, logStoreMarker), []byte(want+"\n")); err != nil {
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
		found = strings.TrimSpace(string(b))
		if found != LogStoreBolt && found != LogStoreWAL {
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

// writeFileSync writes path durably: a synced temporary file renamed over
// it, then the directory synced.
func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

package zkimport

import (
	"cmp"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/xkeeper/xkeeper/keeper/fsm"
)

// zkFile is a snapshot or log file of ZooKeeper's data directory, named
// by the zxid it starts from.
type zkFile struct {
	path string
	zxid int64
}

// listFiles returns dir's files named prefix.ZXID (in hex, maybe with a
// compression suffix), in zxid order.
func listFiles(dir, prefix string) ([]zkFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []zkFile
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), prefix+".")
		if !ok || e.IsDir() {
			continue
		}
		hex, _, _ := strings.Cut(name, ".")
		z, err := strconv.ParseInt(hex, 16, 64)
		if err != nil {
			continue
		}
		out = append(out, zkFile{filepath.Join(dir, e.Name()), z})
	}
	slices.SortFunc(out, func(a, b zkFile) int { return cmp.Compare(a.zxid, b.zxid) })
	return out, nil
}

// versionDir returns dir/version-2 when dir holds one: ZooKeeper's
// dataDir and dataLogDir keep their files there.
func versionDir(dir string) string {
	if st, err := os.Stat(filepath.Join(dir, "version-2")); err == nil && st.IsDir() {
		return filepath.Join(dir, "version-2")
	}
	return dir
}

// openFile opens a snapshot, decompressing a gzip one; snappy, the other
// compression ZooKeeper offers, is refused by name.
func openFile(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	switch {
	case strings.HasSuffix(path, ".gz"):
		z, err := gzip.NewReader(f)
		if err != nil {
			f.Close()
			return nil, err
		}
		return struct {
			io.Reader
			io.Closer
		}{z, f}, nil
	case strings.HasSuffix(path, ".snappy"):
		f.Close()
		return nil, fmt.Errorf("zkimport: %s is snappy-compressed: restart ZooKeeper once with zookeeper.snapshot.compression.method=gz or none so it writes a snapshot this tool reads", path)
	}
	return f, nil
}

// Options tune FromDataDir.
type Options struct {
	// AllowGaps imports what there is when transactions are missing: no
	// transaction log at all, or a log missing between the snapshot and
	// the last one. Without it such an import is refused (GapError,
	// ErrNoLogs): the writes of the missing logs would be lost silently.
	AllowGaps bool
}

// ErrNoLogs means the log directory holds no transaction log: most often
// ZooKeeper's dataLogDir, where they are, was not given.
var ErrNoLogs = errors.New("zkimport: no transaction log (log.*)")

// FromDataDir reads a stopped ZooKeeper's state from its snapshot
// directory (dataDir) and log directory (dataLogDir, often the same): the
// newest snapshot that reads back whole, then every transaction logged
// after it, as ZooKeeper itself would on start. The transactions must
// follow each other from the snapshot on unless o.AllowGaps.
func FromDataDir(snapDir, logDir string, o Options) (*fsm.State, Summary, error) {
	var sum Summary
	snapDir, logDir = versionDir(snapDir), versionDir(logDir)
	snaps, err := listFiles(snapDir, "snapshot")
	if err != nil {
		return nil, sum, fmt.Errorf("zkimport: %w", err)
	}
	if len(snaps) == 0 {
		return nil, sum, fmt.Errorf("zkimport: no snapshot.* file in %s: is it ZooKeeper's dataDir?", snapDir)
	}
	var t *dataTree
	var errs []error
	for i := len(snaps) - 1; i >= 0 && t == nil; i-- {
		if t, err = readSnapshotFile(snaps[i]); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", snaps[i].path, err))
			continue
		}
		sum.Snapshot, sum.SnapshotZxid = snaps[i].path, snaps[i].zxid
	}
	if t == nil {
		return nil, sum, fmt.Errorf("zkimport: no snapshot reads back whole: %w", errors.Join(errs...))
	}
	logs, err := listFiles(logDir, "log")
	if err != nil {
		return nil, sum, fmt.Errorf("zkimport: %w", err)
	}
	if len(logs) == 0 && !o.AllowGaps {
		return nil, sum, fmt.Errorf("%w in %s: is it ZooKeeper's dataLogDir (--log-dir)? Importing the snapshot %s alone loses every write after zxid %#x",
			ErrNoLogs, logDir, sum.Snapshot, sum.SnapshotZxid)
	}
	t.gaps = o.AllowGaps
	first := 0 // the last log that starts at or before the snapshot holds its next transactions
	for i, l := range logs {
		if l.zxid <= t.zxid {
			first = i
		}
	}
	for i, l := range logs[first:] {
		n, err := replayFile(l.path, t)
		sum.Transactions += n
		sum.Logs++
		if errors.Is(err, errTornTail) && first+i == len(logs)-1 {
			sum.TornTail = true
			break
		}
		if err != nil {
			return nil, sum, fmt.Errorf("%s: %w", l.path, err)
		}
	}
	sum.LastZxid = t.zxid
	st, isum, err := t.state()
	sum.ImportSummary = isum
	return st, sum, err
}

func readSnapshotFile(f zkFile) (*dataTree, error) {
	r, err := openFile(f.path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return readSnapshot(r, f.zxid)
}

func replayFile(path string, t *dataTree) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return replayLog(f, t)
}

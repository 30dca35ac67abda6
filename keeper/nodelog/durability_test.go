package nodelog

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flipByte inverts the byte at off of segment seq of dir, as bit rot
// would.
func flipByte(t *testing.T, dir string, seq uint64, off int64) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, segName(seq)), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off)
	require.NoError(t, err)
	b[0] ^= 0xff
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
}

func readSeg(t *testing.T, dir string, seq uint64) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, segName(seq)))
	require.NoError(t, err)
	return b
}

// TestDamageBeforeALaterBatchRefusesToOpen: a bad record in the last
// segment followed by a valid later batch is not a torn tail (a batch is
// written only after the one before it was synced): the log refuses to
// open, naming the damage, and zeroes nothing, so that no group loses the
// acknowledged batches after it. So with the damage in a batch's record
// (its length then unreadable).
func TestDamageBeforeALaterBatchRefusesToOpen(t *testing.T) {
	for _, damage := range []struct {
		name string
		at   func(loc) int64 // the byte to flip, given the entry's place
	}{
		{"entry record", func(at loc) int64 { return at.off + int64(at.n)/2 }},
		{"batch record", func(at loc) int64 { return at.off - batchRecLen + headerLen + 1 }},
	} {
		t.Run(damage.name, func(t *testing.T) {
			dir := t.TempDir()
			l := open(t, dir, 0)
			a, b := openGroup(t, l, "a"), openGroup(t, l, "b")
			for i := uint64(1); i <= 10; i++ {
				require.NoError(t, a.StoreLog(entry(i, 1, fmt.Sprint("a", i))))
				require.NoError(t, b.StoreLog(entry(i, 1, fmt.Sprint("b", i))))
			}
			at := a.g.locs[4] // a's entry 5, alone in its batch, with 11 acknowledged batches after it
			require.NoError(t, l.Close())
			flipByte(t, dir, 1, damage.at(at))
			before := readSeg(t, dir, 1)

			_, err := Open(dir, Options{Fsync: true})
			require.ErrorIs(t, err, ErrDamaged)
			assert.ErrorContains(t, err, fmt.Sprint("a bad batch at offset ", at.off-batchRecLen), "the damaged batch is named")
			assert.ErrorContains(t, err, "a valid one follows")
			assert.Equal(t, before, readSeg(t, dir, 1), "the damaged segment is left as it was found")
			_, err = Open(dir, Options{Fsync: true})
			require.ErrorIs(t, err, ErrDamaged, "and refused again")
		})
	}
}

// TestTornBatchIsDroppedWhole: the last batch, torn by a crash before its
// sync, is dropped whole wherever the tear is, even where the pages of its
// later records reached the disk and those before did not; the batches
// before it stay.
func TestTornBatchIsDroppedWhole(t *testing.T) {
	for _, tear := range []struct {
		name  string
		index int // the entry whose record is torn, of 4 to 8
	}{{"first record", 3}, {"middle record", 5}, {"last record", 7}} {
		t.Run(tear.name, func(t *testing.T) {
			dir := t.TempDir()
			l := open(t, dir, 0)
			s := openGroup(t, l, "g")
			require.NoError(t, s.StoreLogs([]*raft.Log{entry(1, 1, "1"), entry(2, 1, "2"), entry(3, 1, "3")}))
			var last []*raft.Log
			for i := uint64(4); i <= 8; i++ {
				last = append(last, entry(i, 1, fmt.Sprint(i)))
			}
			require.NoError(t, s.StoreLogs(last), "one request: one batch")
			at := s.g.locs[tear.index]
			require.NoError(t, l.Close())
			flipByte(t, dir, 1, at.off+int64(at.n)-1)

			l = open(t, dir, 0)
			s = openGroup(t, l, "g")
			want := model{1: "1", 2: "2", 3: "3"}
			check(t, s, want, "after the tear")
			want[4] = "4 again"
			require.NoError(t, s.StoreLog(entry(4, 2, want[4])))
			require.NoError(t, l.Close())
			l = open(t, dir, 0)
			defer l.Close()
			check(t, openGroup(t, l, "g"), want, "written over the torn batch, reopened")
		})
	}
}

// writeV1Segment writes segment seq of dir as the version before batches
// wrote it (magic xknlog01, records one after the other), with the given
// records and then zeros, and the log's id file if it has none.
func writeV1Segment(t *testing.T, dir string, seq uint64, records ...[]byte) []int64 {
	t.Helper()
	if _, err := ReadID(dir); err != nil {
		require.NoError(t, WriteFile(filepath.Join(dir, idFile), []byte("v1-log")))
	}
	b := binary.LittleEndian.AppendUint64([]byte("xknlog01"), seq)
	var offs []int64
	for _, r := range records {
		offs = append(offs, int64(len(b)))
		b = append(b, r...)
	}
	b = append(b, make([]byte, 4096)...)
	require.NoError(t, os.WriteFile(filepath.Join(dir, segName(seq)), b, 0o644))
	return offs
}

func v1Entry(group string, index uint64, data string) []byte {
	return appendRecord(nil, encodeEntry(group, entry(index, 1, data)))
}

// TestVersion1SegmentsStillOpen: segments the version before batches
// wrote open and replay; new batches go to a new segment; a torn tail of
// a version-1 segment is dropped, and a bad record with a valid one after
// it is refused (the format cannot tell a torn batch's later pages from a
// later batch, so it does not guess).
func TestVersion1SegmentsStillOpen(t *testing.T) {
	dir := t.TempDir()
	writeV1Segment(t, dir, 1, v1Entry("g", 1, "one"), v1Entry("h", 1, "h one"))
	writeV1Segment(t, dir, 2, v1Entry("g", 2, "two"),
		appendRecord(nil, encodeDelete("h", 0, 1)), v1Entry("h", 2, "h two"))
	l := open(t, dir, 0)
	g := openGroup(t, l, "g")
	check(t, g, model{1: "one", 2: "two"}, "g from version-1 segments")
	check(t, openGroup(t, l, "h"), model{2: "h two"}, "h from version-1 segments")
	require.NoError(t, g.StoreLog(entry(3, 1, "three")))
	require.NoError(t, l.Close())
	seqs, err := segmentFiles(dir)
	require.NoError(t, err)
	assert.Equal(t, []uint64{1, 2, 3}, seqs, "batches go to a new segment, not after version-1 records")
	l = open(t, dir, 0)
	check(t, openGroup(t, l, "g"), model{1: "one", 2: "two", 3: "three"}, "after reopen")
	require.NoError(t, l.Close())

	torn := t.TempDir()
	offs := writeV1Segment(t, torn, 1, v1Entry("g", 1, "one"), v1Entry("g", 2, "two"))
	flipByte(t, torn, 1, offs[1]+headerLen+2)
	l = open(t, torn, 0)
	check(t, openGroup(t, l, "g"), model{1: "one"}, "a version-1 torn tail dropped")
	require.NoError(t, l.Close())

	damaged := t.TempDir()
	offs = writeV1Segment(t, damaged, 1, v1Entry("g", 1, "one"), v1Entry("g", 2, "two"), v1Entry("g", 3, "three"))
	flipByte(t, damaged, 1, offs[1]+headerLen+2)
	before := readSeg(t, damaged, 1)
	_, err = Open(damaged, Options{Fsync: true})
	require.ErrorIs(t, err, ErrDamaged)
	assert.Equal(t, before, readSeg(t, damaged, 1), "nothing zeroed")
}

// failSyncs makes the next segment syncs fail with EIO, as a failing disk
// does, until the test ends.
func failSyncs(t *testing.T) {
	t.Helper()
	saved := syncData
	syncData = func(*os.File) error { return syscall.EIO }
	t.Cleanup(func() { syncData = saved })
}

// TestFailedSyncRefusesToOpenUntilCleared: after a failed fdatasync the
// batch may read back from the page cache although it never reached the
// disk, so a failed write leaves a durable record (FailedFile) and the
// log refuses to open, saying why and how to clear it, until an operator
// clears it (ClearFailure, or deleting the file).
func TestFailedSyncRefusesToOpenUntilCleared(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 0)
	s := openGroup(t, l, "g")
	require.NoError(t, s.StoreLog(entry(1, 1, "one")))
	failSyncs(t)
	err := s.StoreLog(entry(2, 1, "two"))
	require.ErrorIs(t, err, syscall.EIO)
	require.ErrorIs(t, s.StoreLog(entry(2, 1, "two")), syscall.EIO, "the log takes no more writes")
	require.NoError(t, l.Close())
	syncData = datasync
	torn := readSeg(t, dir, 1)
	copy(torn[len(torn)-100:], "a torn tail, which an open of a failed log leaves alone")
	require.NoError(t, os.WriteFile(filepath.Join(dir, segName(1)), torn, 0o644))

	_, err = Open(dir, Options{Fsync: true})
	require.ErrorIs(t, err, ErrWriteFailed)
	assert.Equal(t, torn, readSeg(t, dir, 1), "a failed log is not written to")
	assert.ErrorContains(t, err, filepath.Join(dir, FailedFile), "the error names the file to clear")
	assert.ErrorContains(t, err, "input/output error", "and the failure it records")
	_, err = Open(dir, Options{Fsync: true})
	require.ErrorIs(t, err, ErrWriteFailed, "refused until cleared")

	require.NoError(t, ClearFailure(dir))
	l = open(t, dir, 0)
	defer l.Close()
	s = openGroup(t, l, "g")
	first, _ := s.FirstIndex()
	assert.Equal(t, uint64(1), first)
	require.NoError(t, s.StoreLog(entry(3, 1, "three")), "the log writes again once cleared")
}

// TestUnrecordedFailureSaysSo: where the failure cannot be recorded either
// (here the marker's temporary file cannot be created), the log's error
// says that a restart would not know of it.
func TestUnrecordedFailureSaysSo(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 0)
	defer l.Close()
	s := openGroup(t, l, "g")
	require.NoError(t, os.Mkdir(filepath.Join(dir, FailedFile+".tmp"), 0o755))
	failSyncs(t)
	err := s.StoreLog(entry(1, 1, "one"))
	require.ErrorIs(t, err, syscall.EIO)
	assert.ErrorContains(t, err, "could not be recorded")
	assert.ErrorContains(t, l.Failed(), "could not be recorded")
}

// TestDroppedGroupIsRefused: a group Drop deleted (xkeeper node prune) is
// not made anew, empty, for a member that comes back naming it with its
// old term and vote: Group refuses it, in the same run, after a reopen and
// after the segments that held the drop were collected.
func TestDroppedGroupIsRefused(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 4096)
	gone, kept := openGroup(t, l, "gone"), openGroup(t, l, "kept")
	for i := uint64(1); i <= 50; i++ {
		require.NoError(t, gone.StoreLog(entry(i, 1, string(make([]byte, 100)))))
	}
	require.NoError(t, gone.Close())
	require.NoError(t, l.Drop("gone"))
	_, err := l.Group("gone")
	require.ErrorIs(t, err, ErrGroupDropped)
	require.ErrorIs(t, l.Drop("gone"), ErrGroupDropped)
	require.NoError(t, l.Close())

	l = open(t, dir, 4096)
	_, err = l.Group("gone")
	require.ErrorIs(t, err, ErrGroupDropped, "after a reopen")
	assert.NotContains(t, groupNames(l), "gone")
	kept = openGroup(t, l, "kept")
	m := model{}
	for i := uint64(1); i <= 200; i++ { // enough to collect the segments before the drop
		m[i] = fmt.Sprint(i, string(make([]byte, 100)))
		require.NoError(t, kept.StoreLog(entry(i, 1, m[i])))
		if i > 20 {
			require.NoError(t, kept.DeleteRange(i-20, i-20))
			delete(m, i-20)
		}
	}
	seqs, err := segmentFiles(dir)
	require.NoError(t, err)
	require.Greater(t, seqs[0], uint64(3), "the segments of the drop were collected")
	require.NoError(t, l.Close())

	l = open(t, dir, 4096)
	defer l.Close()
	_, err = l.Group("gone")
	require.ErrorIs(t, err, ErrGroupDropped, "after collection")
	check(t, openGroup(t, l, "kept"), m, "kept")
}

func groupNames(l *Log) []string {
	var names []string
	for _, g := range l.Groups() {
		names = append(names, g.Name)
	}
	return names
}

// TestOpenSyncsTheDirectoriesItCreates: Open creates the log's directory
// and any missing parents, and syncs each of them and the existing
// directory that holds the first, so that a crash cannot lose the log's
// directory entry after the segments in it were synced.
func TestOpenSyncsTheDirectoriesItCreates(t *testing.T) {
	var mu sync.Mutex
	var synced []string
	saved := syncDir
	syncDir = func(dir string) error {
		mu.Lock()
		synced = append(synced, filepath.Clean(dir))
		mu.Unlock()
		return saved(dir)
	}
	defer func() { syncDir = saved }()
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b", "log")
	l := open(t, dir, 0)
	require.NoError(t, l.Close())
	for _, d := range []string{root, filepath.Join(root, "a"), filepath.Join(root, "a", "b"), dir} {
		assert.True(t, slices.Contains(synced, d), "%s synced (synced: %v)", d, synced)
	}
}

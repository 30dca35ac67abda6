package nodelog

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func entry(index, term uint64, data string) *raft.Log {
	return &raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: []byte(data)}
}

func open(t *testing.T, dir string, segBytes int64) *Log {
	t.Helper()
	l, err := Open(dir, Options{Fsync: true, SegmentBytes: segBytes})
	require.NoError(t, err)
	return l
}

func openGroup(t *testing.T, l *Log, name string) *Store {
	t.Helper()
	s, err := l.Group(name)
	require.NoError(t, err)
	return s
}

// model is what a group's log should hold: its entries' data by index.
type model map[uint64]string

// check asserts that s holds exactly m.
func check(t *testing.T, s *Store, m model, msg string) {
	t.Helper()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if len(m) == 0 {
		assert.Zero(t, first, "%s: first", msg)
		assert.Zero(t, last, "%s: last", msg)
		return
	}
	var lo, hi uint64 = ^uint64(0), 0
	for i := range m {
		lo, hi = min(lo, i), max(hi, i)
	}
	require.Equal(t, lo, first, "%s: first", msg)
	require.Equal(t, hi, last, "%s: last", msg)
	for i := lo; i <= hi; i++ {
		var got raft.Log
		require.NoError(t, s.GetLog(i, &got), "%s: entry %d", msg, i)
		require.Equal(t, m[i], string(got.Data), "%s: entry %d", msg, i)
		require.Equal(t, i, got.Index)
	}
	var got raft.Log
	assert.ErrorIs(t, s.GetLog(hi+1, &got), raft.ErrLogNotFound)
}

func TestGroupsShareTheLogAndSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 0)
	a, b := openGroup(t, l, "a"), openGroup(t, l, "b")
	var wg sync.WaitGroup
	for _, s := range []*Store{a, b} {
		wg.Go(func() {
			for i := uint64(1); i <= 200; i++ {
				assert.NoError(t, s.StoreLogs([]*raft.Log{entry(i, 1, fmt.Sprint(s.g.name, i))}))
			}
		})
	}
	wg.Wait()
	want := func(name string) model {
		m := model{}
		for i := uint64(1); i <= 200; i++ {
			m[i] = fmt.Sprint(name, i)
		}
		return m
	}
	check(t, a, want("a"), "a")
	check(t, b, want("b"), "b")
	_, err := l.Group("a")
	require.Error(t, err, "a group opened twice")
	id := l.ID()
	require.NoError(t, l.Close())
	assert.ErrorIs(t, a.StoreLog(entry(201, 1, "late")), ErrClosed)

	l = open(t, dir, 0)
	defer l.Close()
	assert.Equal(t, id, l.ID(), "the log's identity")
	check(t, openGroup(t, l, "a"), want("a"), "a after reopen")
	check(t, openGroup(t, l, "b"), want("b"), "b after reopen")
	seqs, err := segmentFiles(dir)
	require.NoError(t, err)
	assert.Len(t, seqs, 1, "a clean tail is written on, not left for a new segment")
}

// TestGroupsShareBatches: appends of several groups that wait while a
// write is under way go out together, in one write and one fsync, which
// is what the node log is for; and appends from several groups at once all
// land.
func TestGroupsShareBatches(t *testing.T) {
	l := open(t, t.TempDir(), 0)
	defer l.Close()
	const groups, appends = 4, 100
	stores := make([]*Store, groups)
	for g := range groups {
		stores[g] = openGroup(t, l, fmt.Sprint("g", g))
	}

	l.qmu.Lock() // a write under way: what comes meanwhile queues
	l.writing = true
	l.writers.Add(1)
	l.qmu.Unlock()
	drained := false
	defer func() { // before Close, which waits for the write under way
		if !drained {
			l.drain()
		}
	}()
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Go(func() { assert.NoError(t, s.StoreLog(entry(1, 1, "first"))) })
	}
	require.Eventually(t, func() bool {
		l.qmu.Lock()
		defer l.qmu.Unlock()
		return len(l.queue) == groups
	}, 10*time.Second, time.Millisecond, "every group's append queued")
	before := l.batches.Load()
	drained = true
	go l.drain() // the write under way ends, and the writer takes the queue
	wg.Wait()
	assert.Equal(t, int64(1), l.batches.Load()-before, "the queued appends of %d groups share one write", groups)

	for _, s := range stores {
		wg.Go(func() {
			for i := uint64(2); i <= appends; i++ {
				assert.NoError(t, s.StoreLog(entry(i, 1, "x")))
			}
		})
	}
	wg.Wait()
	t.Logf("%d appends in %d batches", groups*appends, l.batches.Load())
	assert.Equal(t, int64(groups*appends), l.requests.Load())
	for _, s := range stores {
		last, err := s.LastIndex()
		require.NoError(t, err)
		assert.Equal(t, uint64(appends), last)
	}
}

func TestBadRequestsAreRefusedAndWriteNothing(t *testing.T) {
	l := open(t, t.TempDir(), 0)
	defer l.Close()
	s := openGroup(t, l, "g")
	require.NoError(t, s.StoreLogs([]*raft.Log{entry(5, 1, "5"), entry(6, 1, "6"), entry(7, 1, "7")}))
	assert.ErrorContains(t, s.StoreLog(entry(9, 1, "9")), "gap")
	assert.ErrorContains(t, s.StoreLogs([]*raft.Log{entry(8, 1, "8"), entry(10, 1, "10")}), "out of sequence")
	assert.ErrorContains(t, s.StoreLog(entry(0, 1, "0")), "index 0")
	assert.ErrorContains(t, s.DeleteRange(6, 6), "neither a prefix nor a suffix")
	check(t, s, model{5: "5", 6: "6", 7: "7"}, "after refusals")
}

// TestRecordAboveTheReadLimitIsRefused: an entry whose record a replay
// would not read (above maxRecord, lowered here) is refused with an error,
// not written and acknowledged; one exactly at the limit is kept, and the
// log goes on and reopens with every entry it acknowledged.
func TestRecordAboveTheReadLimitIsRefused(t *testing.T) {
	defer func(limit uint32) { maxRecord = limit }(maxRecord)
	maxRecord = 1 << 10
	sized := func(index uint64, n int) *raft.Log {
		e := entry(index, 1, strings.Repeat("x", n))
		for entryLen("g", e) > n {
			e.Data = e.Data[1:]
		}
		return e
	}
	dir := t.TempDir()
	l := open(t, dir, 0)
	s := openGroup(t, l, "g")
	require.NoError(t, s.StoreLog(entry(1, 1, "1")))
	atLimit := sized(2, int(maxRecord))
	require.Equal(t, int(maxRecord), entryLen("g", atLimit))
	require.NoError(t, s.StoreLog(atLimit))
	over := sized(3, int(maxRecord)+1)
	assert.ErrorContains(t, s.StoreLog(over), "above the 1024 a replay reads")
	require.NoError(t, s.StoreLog(entry(3, 1, "3")), "the log takes writes after a refusal")
	want := model{1: "1", 2: string(atLimit.Data), 3: "3"}
	check(t, s, want, "after the refusal")
	require.NoError(t, l.Close())

	l = open(t, dir, 0)
	defer l.Close()
	check(t, openGroup(t, l, "g"), want, "after reopen")
}

func TestTornTailIsDroppedAndTheLogGoesOn(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 0)
	s := openGroup(t, l, "g")
	m := model{}
	for i := uint64(1); i <= 10; i++ {
		m[i] = fmt.Sprint("entry ", i)
		require.NoError(t, s.StoreLog(entry(i, 1, m[i])))
	}
	at := s.g.locs[9] // the last entry: cut its record in half, then garbage
	require.NoError(t, l.Close())
	f, err := os.OpenFile(filepath.Join(dir, segName(1)), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("garbage after a tear"), at.off+int64(at.n)/2)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	delete(m, 10)

	l = open(t, dir, 0)
	s = openGroup(t, l, "g")
	check(t, s, m, "after the tear")
	m[10] = "entry 10 again"
	require.NoError(t, s.StoreLog(entry(10, 2, m[10])))
	require.NoError(t, l.Close())
	seqs, err := segmentFiles(dir)
	require.NoError(t, err)
	assert.Equal(t, []uint64{1}, seqs, "the torn tail is zeroed and written over")

	l = open(t, dir, 0)
	defer l.Close()
	check(t, openGroup(t, l, "g"), m, "after the second reopen")
}

// TestDamageBeforeTheLastSegmentRefusesToOpen: only the last segment can
// hold a batch a crash tore; a bad record anywhere else would silently cut
// off acknowledged entries, so the log refuses to open.
func TestDamageBeforeTheLastSegmentRefusesToOpen(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 4096)
	s := openGroup(t, l, "g")
	for i := uint64(1); i <= 100; i++ {
		require.NoError(t, s.StoreLog(entry(i, 1, strings.Repeat("x", 200))))
	}
	at := s.g.locs[0]
	require.NoError(t, l.Close())
	seqs, err := segmentFiles(dir)
	require.NoError(t, err)
	require.Greater(t, len(seqs), 2, "the entries fill several segments")
	f, err := os.OpenFile(filepath.Join(dir, segName(seqs[0])), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("bit rot"), at.off+int64(at.n)/2)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = Open(dir, Options{})
	assert.ErrorContains(t, err, "is damaged")
}

func TestCutShortSegmentIsRemoved(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 0)
	require.NoError(t, openGroup(t, l, "g").StoreLog(entry(1, 1, "one")))
	require.NoError(t, l.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, segName(2)), nil, 0o644))
	l = open(t, dir, 0)
	check(t, openGroup(t, l, "g"), model{1: "one"}, "after the empty segment")
	require.NoError(t, l.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, segName(9)), []byte("not a segment"), 0o644))
	_, err := Open(dir, Options{})
	assert.ErrorContains(t, err, "not a segment file")
	require.NoError(t, os.WriteFile(filepath.Join(dir, segName(2)), nil, 0o644))
	_, err = Open(dir, Options{})
	assert.ErrorContains(t, err, "has no header but later segments exist", "only the last segment's creation can have been cut short")
}

// TestRandomHistoriesReplay runs random histories of raft's calls on three
// groups over tiny segments — appends, suffix deletions (a deposed
// leader's entries), prefix deletions (compaction), reopening — and checks every group against a model after each
// reopen, so that segment removal and replay agree with what ran.
func TestRandomHistoriesReplay(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomHistory(t, seed) })
	}
}

func randomHistory(t *testing.T, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 7))
	dir := t.TempDir()
	names := []string{"a", "b", "c"}
	models := map[string]model{}
	l := open(t, dir, 4096)
	stores := map[string]*Store{}
	reopen := func() {
		require.NoError(t, l.Close())
		l = open(t, dir, 4096)
		for _, n := range names {
			stores[n] = openGroup(t, l, n)
		}
	}
	reopen()
	defer func() { l.Close() }()
	term := uint64(1)
	for step := range 400 {
		n := names[rnd.IntN(len(names))]
		s, m := stores[n], models[n]
		if m == nil {
			m = model{}
			models[n] = m
		}
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		switch op := rnd.IntN(20); {
		case op < 13: // append a few entries
			k := 1 + rnd.IntN(5)
			var logs []*raft.Log
			for i := last + 1; i <= last+uint64(k); i++ {
				m[i] = fmt.Sprintf("%s%d.%d", n, i, step)
				logs = append(logs, entry(i, term, m[i]+string(make([]byte, rnd.IntN(300)))))
				m[i] = string(logs[len(logs)-1].Data)
			}
			require.NoError(t, s.StoreLogs(logs))
		case op < 16 && last > first: // a suffix deleted, then rewritten in a new term
			from := first + 1 + uint64(rnd.IntN(int(last-first)))
			require.NoError(t, s.DeleteRange(from, last))
			for i := from; i <= last; i++ {
				delete(m, i)
			}
			term++
		case op < 19 && last > 0: // compaction
			upTo := first + uint64(rnd.IntN(int(last-first+1)))
			require.NoError(t, s.DeleteRange(first, upTo))
			for i := first; i <= upTo; i++ {
				delete(m, i)
			}
		case op == 19:
			reopen()
			for _, name := range names {
				check(t, stores[name], models[name], fmt.Sprintf("seed %d step %d group %s", seed, step, name))
			}
		}
	}
	reopen()
	for _, name := range names {
		check(t, stores[name], models[name], fmt.Sprintf("seed %d at the end, group %s", seed, name))
	}
	for _, s := range l.segs[:len(l.segs)-1] {
		assert.Positive(t, s.live, "segment %d holds no live entry but was kept", s.seq)
	}
}

func TestEntryRecordKeepsEveryField(t *testing.T) {
	in := raft.Log{Index: 1 << 40, Term: 7, Type: raft.LogConfiguration, Data: []byte("data"),
		Extensions: []byte("ext"), AppendedAt: time.Unix(1_790_000_000, 123)}
	body, n, ok := nextRecord(appendRecord(nil, encodeEntry("group", &in)))
	require.True(t, ok)
	assert.Equal(t, headerLen+len(body), n)
	r, err := decode(body)
	require.NoError(t, err)
	assert.Equal(t, "group", r.group)
	assert.True(t, in.AppendedAt.Equal(r.entry.AppendedAt), "appended at %v, read %v", in.AppendedAt, r.entry.AppendedAt)
	r.entry.AppendedAt = in.AppendedAt
	assert.Equal(t, in, r.entry)
	_, err = decode(append(body, 0))
	assert.ErrorIs(t, err, errCorrupt, "a byte after the fields")
}

// TestOpenLogIsLocked: a second Open of a directory whose log is open (a
// node still running, or started twice) fails with ErrInUse and touches
// nothing; once the first closes, it opens.
func TestOpenLogIsLocked(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 0)
	require.NoError(t, openGroup(t, l, "g").StoreLog(entry(1, 1, "one")))
	_, err := Open(dir, Options{})
	require.ErrorIs(t, err, ErrInUse)
	require.NoError(t, l.Close())
	l = open(t, dir, 0)
	defer l.Close()
	check(t, openGroup(t, l, "g"), model{1: "one"}, "after the refused open")
}

// TestLostIdentityRefusesToOpen: a log whose id file is gone while its
// segments remain does not start anew under another identity.
func TestLostIdentityRefusesToOpen(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 0)
	require.NoError(t, openGroup(t, l, "g").StoreLog(entry(1, 1, "one")))
	require.NoError(t, l.Close())
	require.NoError(t, os.Remove(filepath.Join(dir, idFile)))
	_, err := Open(dir, Options{})
	require.ErrorContains(t, err, "no id file")
	_, err = os.Stat(filepath.Join(dir, idFile))
	require.ErrorIs(t, err, os.ErrNotExist, "no new identity was written")
}

// TestDropRemovesAGroupAndItsSegments drops a group whose entries fill
// segments of their own: Groups no longer lists it, those segments go, and
// the other group's entries stay, across a reopen. An open group is not
// dropped.
func TestDropRemovesAGroupAndItsSegments(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 4096)
	kept, gone := openGroup(t, l, "kept"), openGroup(t, l, "gone")
	require.NoError(t, kept.StoreLog(entry(1, 1, "k1")))
	for i := uint64(1); i <= 200; i++ {
		require.NoError(t, gone.StoreLog(entry(i, 1, strings.Repeat("x", 100))))
	}
	require.NoError(t, kept.StoreLog(entry(2, 1, "k2")))
	assert.Equal(t, []GroupRange{{Name: "gone", First: 1, Last: 200}, {Name: "kept", First: 1, Last: 2}}, l.Groups())
	require.Error(t, l.Drop("gone"), "the group is open")
	require.NoError(t, gone.Close())
	before, err := segmentFiles(dir)
	require.NoError(t, err)

	require.NoError(t, l.Drop("gone"))
	after, err := segmentFiles(dir)
	require.NoError(t, err)
	assert.Less(t, len(after), len(before)-1, "the segments that held only the dropped group's entries are removed")
	require.NoError(t, l.Close())

	l = open(t, dir, 4096)
	defer l.Close()
	for _, g := range l.Groups() {
		if g.Name == "gone" {
			assert.Zero(t, g.Last, "no entry of the dropped group comes back")
		}
	}
	check(t, openGroup(t, l, "kept"), model{1: "k1", 2: "k2"}, "the other group after the drop")
}

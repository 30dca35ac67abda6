// Package nodelog is the Raft log a node shares among the groups it hosts
// (its members of different shards). Every group's appends queue for one
// writer and go into one sequence of segment files, so the node pays one
// write and one fdatasync per batch however many shards it hosts, where a
// log per member pays one each.
//
// Each record names its group, and each write is a batch of records that
// a replay applies whole or not at all. A replay reads the segments in
// order and rebuilds every group's index in memory. Only the last batch of
// the last segment may be bad (a batch a crash tore before its sync was
// acknowledged): that tail is zeroed, durably, and written over. A bad
// batch followed by a valid one, or a bad record in any segment but the
// last, is damage: the log refuses to open (ErrDamaged) and changes
// nothing, rather than lose the acknowledged batches after it. A failed
// write fails the log and leaves FailedFile behind, which keeps it from
// opening until an operator has checked the disk (ClearFailure). Segments
// whose entries are all dead (compacted, truncated) are removed after a
// state record that makes what they held irrelevant to a replay.
package nodelog

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultSegmentBytes is the size at which the writer starts a new
// segment file.
const DefaultSegmentBytes = 64 << 20

// Options configures a Log.
type Options struct {
	// Fsync syncs every batch before it is acknowledged; false only for
	// tests.
	Fsync bool
	// SegmentBytes is the size at which a new segment file starts;
	// DefaultSegmentBytes if 0.
	SegmentBytes int64
	Logger       *slog.Logger
}

// ErrInUse is returned by Open when another open log, in this process or
// another, holds the directory: a node still running.
var ErrInUse = errors.New("nodelog: the log is open elsewhere (is the node still running?)")

// ErrDamaged is wrapped by Open's error when a segment holds a bad record
// that a crash cannot explain (a torn batch is only ever the last one):
// the log is left as it is found, for an operator to look at.
var ErrDamaged = errors.New("nodelog: the log is damaged")

// ErrWriteFailed is wrapped by Open's error when a write of the log failed
// (FailedFile records it) and no operator has cleared it since.
var ErrWriteFailed = errors.New("nodelog: a write of the log failed")

// ErrGroupDropped is wrapped by Group's error for a group Drop deleted.
var ErrGroupDropped = errors.New("nodelog: the group was dropped")

// FailedFile is the file, in the log's directory, that records a failed
// write; Open refuses the log while it exists (see ClearFailure).
const FailedFile = "write-failed"

// ErrClosed is returned by a group's methods after the log is closed.
var ErrClosed = errors.New("nodelog: log closed")

// maxBatch bounds the requests one write takes.
const maxBatch = 1024

// idFile names the log's identity, which each group's member records so
// that a member never runs on a log other than the one that holds its
// entries.
const idFile = "id"

// lockFile is the file an open log holds locked (flock), so that no two
// logs write one directory.
const lockFile = "lock"

// Log is a node's Raft log.
type Log struct {
	dir  string
	opts Options
	id   string
	lock *os.File // held locked while the log is open

	// mu guards groups and segs for readers; only the writer changes them.
	mu      sync.RWMutex
	groups  map[string]*group
	dropped map[string]struct{} // the groups Drop deleted, whose names Group refuses
	segs    []*segment          // in order; the last is the one written

	// The writer: whoever finds no write under way writes what is queued
	// (its own request first), so an append that meets no other costs no
	// hand-off between goroutines; requests that arrive meanwhile queue
	// and go in the next batch, which a goroutine of the log's writes.
	qmu     sync.Mutex
	queue   []*request
	writing bool
	stopped bool
	writers sync.WaitGroup // a write under way

	closed   sync.Once
	batches  atomic.Int64          // batches written
	requests atomic.Int64          // requests answered
	written  atomic.Int64          // bytes of records written
	failed   atomic.Pointer[error] // the writer's first failure, which fails every later request
	buf      []byte                // the writer's scratch buffer
}

// request is one call of a group's StoreLogs or DeleteRange.
type request struct {
	g        *group
	logs     []*raft.Log
	delete   bool
	drop     bool // Drop: the group's entries and name go
	min, max uint64
	done     chan error
}

// Open opens the log in dir, creating it if new, and replays it. It
// refuses a log that is damaged (ErrDamaged) or whose write failed
// (ErrWriteFailed), changing nothing.
func Open(dir string, opts Options) (*Log, error) {
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = DefaultSegmentBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	l := &Log{dir: dir, opts: opts, groups: map[string]*group{}, dropped: map[string]struct{}{}}
	if err := mkdirAll(dir); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	l.lock = lock
	err = checkFailure(dir) // before open, which may write (a torn tail)
	if err == nil {
		err = l.open()
	}
	if err != nil {
		for _, s := range l.segs {
			s.f.Close()
		}
		lock.Close()
		return nil, err
	}
	return l, nil
}

// ReadID returns the identity of the log in dir without opening it (the
// log may be open elsewhere); the error wraps fs.ErrNotExist where dir
// holds no log.
func ReadID(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, idFile))
	return strings.TrimSpace(string(b)), err
}

// checkFailure returns an error wrapping ErrWriteFailed if the log in dir
// recorded a failed write (FailedFile).
func checkFailure(dir string) error {
	path := filepath.Join(dir, FailedFile)
	note, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("nodelog: read %s: %w", path, err)
	}
	return fmt.Errorf("%w (%s): what it was writing may read back from the page cache without being on disk, "+
		"and the disk may have lost more: check the disk (kernel log, SMART), then delete %s (`xkeeper node clear-failure --commit` does) to open the log",
		ErrWriteFailed, strings.TrimSpace(string(note)), path)
}

// mkdirAll creates dir and any missing parents, and syncs each directory
// it creates and the one that holds the first, so that their entries
// survive a crash.
func mkdirAll(dir string) error {
	var missing []string // from dir up
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range append(missing, filepath.Dir(missing[len(missing)-1])) {
		if err := syncDir(d); err != nil {
			return fmt.Errorf("nodelog: sync the new directory %s: %w", d, err)
		}
	}
	return nil
}

// ClearFailure deletes the record of a failed write (FailedFile) from the
// log in dir, which must not be open, once an operator has checked the
// disk; Open then opens the log again. A log without one is left as it is.
func ClearFailure(dir string) error {
	lock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := os.Remove(filepath.Join(dir, FailedFile)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	return syncDir(dir)
}

func (l *Log) open() error {
	id, err := ReadID(l.dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		// The identity is written before the first segment: segments
		// without it are a log whose identity was lost, and a new one
		// would disown every member's marker.
		if seqs, err := segmentFiles(l.dir); err != nil || len(seqs) > 0 {
			return errors.Join(err, fmt.Errorf("nodelog: %s holds segments but no %s file: restore it (the members' %s name it) rather than start a new log over them",
				l.dir, idFile, "log_store markers"))
		}
		id = uuid.NewString()
		if err := WriteFile(filepath.Join(l.dir, idFile), []byte(id)); err != nil {
			return fmt.Errorf("nodelog: record the log's identity: %w", err)
		}
	case err != nil:
		return err
	}
	l.id = id
	seqs, err := segmentFiles(l.dir)
	if err != nil {
		return err
	}
	for i, seq := range seqs {
		last := i == len(seqs)-1
		seg, clean, err := l.readSegment(seq)
		if err != nil {
			return err
		}
		if seg == nil && !last {
			return fmt.Errorf("nodelog: %s: segment %s has no header but later segments exist", l.dir, segName(seq))
		}
		if seg == nil {
			l.opts.Logger.Warn("node log: removing a segment file whose creation was cut short", "file", segName(seq))
			if err := os.Remove(filepath.Join(l.dir, segName(seq))); err != nil {
				return err
			}
			continue
		}
		l.segs = append(l.segs, seg)
		if clean {
			continue
		}
		if !last {
			return fmt.Errorf("%w: %s: segment %s has no valid record at offset %d, and later segments follow",
				ErrDamaged, l.dir, segName(seq), seg.size)
		}
		l.opts.Logger.Warn("node log: the last segment ends in a torn batch; zeroing it",
			"file", segName(seq), "at", seg.size, "bytes", seg.zeroed-seg.size)
		if err := seg.zeroTail(l.opts.Fsync); err != nil {
			return fmt.Errorf("nodelog: %s: zero the torn tail of %s: %w", l.dir, segName(seq), err)
		}
	}
	for _, g := range l.groups {
		if g.holes() {
			return fmt.Errorf("nodelog: %s: group %s lacks entries between %d and %d", l.dir, g.name, g.first, g.last())
		}
	}
	next := uint64(1)
	if len(l.segs) > 0 {
		last := l.segs[len(l.segs)-1]
		if !last.v1 {
			return nil // write on after the last segment's last record
		}
		next = last.seq + 1 // batches go to a version-2 segment
	}
	seg, err := l.createSegment(next)
	if err != nil {
		return err
	}
	l.segs = append(l.segs, seg)
	return nil
}

// ID is the log's identity, fixed when its directory was created.
func (l *Log) ID() string { return l.id }

// Group returns the log of the group called name (a member's), for one
// user at a time. It refuses, with ErrGroupDropped, a group Drop deleted:
// a member that comes back naming it would run on an empty log with its
// old term and vote.
func (l *Log) Group(name string) (*Store, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.dropped[name]; ok {
		return nil, fmt.Errorf("%w: group %s of the node log in %s was dropped (xkeeper node prune: no member data directory named it); "+
			"a member naming it would start on an empty log with its old term and vote, and could elect a member that lacks committed entries: "+
			"remove the member from its shard and add it back with an empty data directory", ErrGroupDropped, name, l.dir)
	}
	g := l.groupOf(name)
	if g.opened {
		return nil, fmt.Errorf("nodelog: group %s is already open", name)
	}
	g.opened = true
	return &Store{l: l, g: g}, nil
}

// Close stops the writer and closes the segment files. A group's methods
// return ErrClosed after it.
func (l *Log) Close() error {
	var err error
	l.closed.Do(func() {
		l.qmu.Lock()
		l.stopped = true
		l.qmu.Unlock()
		l.writers.Wait()
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, s := range l.segs {
			err = errors.Join(err, s.f.Close())
		}
		l.segs = nil
		err = errors.Join(err, l.lock.Close())
	})
	return err
}

// Failed returns the write error after which the log takes no more
// writes, nil while it writes.
func (l *Log) Failed() error {
	if p := l.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// GroupRange is a group's name and the indexes of its first and last
// entries, both 0 when it has none.
type GroupRange struct {
	Name        string
	First, Last uint64
}

// Groups lists the groups the log holds entries of, or mentions still, by
// name.
func (l *Log) Groups() []GroupRange {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]GroupRange, 0, len(l.groups))
	for name, g := range l.groups {
		first := g.first
		if g.empty() {
			first = 0
		}
		out = append(out, GroupRange{Name: name, First: first, Last: g.last()})
	}
	slices.SortFunc(out, func(a, b GroupRange) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Drop deletes every entry of a group no member uses, and its name, which
// Group refuses from then on, across reopens: the segments that held only
// its entries are then removed. It fails if the group is open.
func (l *Log) Drop(name string) error {
	g, err := l.Group(name)
	if err != nil {
		return err
	}
	defer g.Close()
	return l.do(&request{g: g.g, drop: true})
}

// do queues r and waits for its answer, writing the queue itself if no
// write is under way.
func (l *Log) do(r *request) error {
	r.done = make(chan error, 1)
	l.qmu.Lock()
	if l.stopped {
		l.qmu.Unlock()
		return ErrClosed
	}
	l.queue = append(l.queue, r)
	if l.writing {
		l.qmu.Unlock()
		return <-r.done
	}
	l.writing = true
	l.writers.Add(1)
	batch := l.take()
	l.qmu.Unlock()
	l.write(batch)
	l.qmu.Lock()
	if len(l.queue) > 0 {
		go l.drain() // r is answered: the rest is not this caller's to wait for
	} else {
		l.writing = false
		l.writers.Done()
	}
	l.qmu.Unlock()
	return <-r.done
}

// drain writes batches until the queue is empty.
func (l *Log) drain() {
	l.qmu.Lock()
	for len(l.queue) > 0 {
		batch := l.take()
		l.qmu.Unlock()
		l.write(batch)
		l.qmu.Lock()
	}
	l.writing = false
	l.writers.Done()
	l.qmu.Unlock()
}

// take removes up to maxBatch requests from the queue; qmu is held.
func (l *Log) take() []*request {
	n := min(len(l.queue), maxBatch)
	batch := slices.Clone(l.queue[:n])
	l.queue = slices.Delete(l.queue, 0, n)
	return batch
}

// pending is a record of the batch being written, for the groups once it
// is on disk.
type pending struct {
	rec record
	off int64
	n   int
}

// write writes a batch's records and then applies them, answering each
// request with its own error, or the write's.
func (l *Log) write(batch []*request) {
	errs := make([]error, len(batch))
	var recs []pending
	if l.Failed() == nil {
		buf := beginBatch(l.buf[:0])
		spans := map[*group]span{}
		add := func(r record, encode func([]byte) []byte) {
			start := len(buf)
			buf = appendRecord(buf, encode)
			recs = append(recs, pending{rec: r, off: int64(start), n: len(buf) - start})
		}
		for i, r := range batch {
			sp, ok := spans[r.g]
			if !ok {
				sp = span{first: r.g.first, last: r.g.last()}
			}
			if r.drop {
				sp = span{}
				ranges := []rangeRec{{group: r.g.name, last: tombstone}}
				add(record{kind: kindState, ranges: ranges}, encodeState(ranges))
			} else if r.delete {
				min, max, write, err := sp.delete(r.g.name, r.min, r.max)
				if errs[i] = err; err == nil && write {
					add(record{kind: kindDelete, group: r.g.name, min: min, max: max}, encodeDelete(r.g.name, min, max))
				}
			} else if errs[i] = sp.store(r.g.name, r.logs); errs[i] == nil {
				for _, e := range r.logs {
					add(record{kind: kindEntry, group: r.g.name, entry: raft.Log{Index: e.Index}}, encodeEntry(r.g.name, e))
				}
			}
			spans[r.g] = sp
		}
		endBatch(buf, 0)
		seg, base, err := l.append(buf, len(recs) == 0)
		l.buf = buf[:0]
		l.batches.Add(1)
		if len(recs) > 0 {
			l.written.Add(int64(len(buf)))
		}
		if err != nil {
			l.fail(err)
		} else {
			l.mu.Lock()
			for _, p := range recs {
				l.apply(p.rec, seg, base+p.off, p.n)
			}
			l.mu.Unlock()
			l.collect()
		}
	}
	l.requests.Add(int64(len(batch)))
	failed := l.Failed()
	for i, r := range batch {
		if failed != nil {
			errs[i] = failed
		}
		r.done <- errs[i]
	}
}

// append writes b, a batch, after the last segment's last record, first
// starting a new segment if b would take the last past
// Options.SegmentBytes, and returns the segment and the offset b went to;
// it writes nothing if empty (b holds no record).
func (l *Log) append(b []byte, empty bool) (*segment, int64, error) {
	seg := l.segs[len(l.segs)-1]
	if empty {
		return seg, seg.size, nil
	}
	if seg.size > int64(segHeaderLen) && seg.size+int64(len(b)) > l.opts.SegmentBytes {
		next, err := l.createSegment(seg.seq + 1)
		if err != nil {
			return nil, 0, err
		}
		l.mu.Lock()
		l.segs = append(l.segs, next)
		l.mu.Unlock()
		seg = next
	}
	base := seg.size
	return seg, base, seg.write(b, l.opts.SegmentBytes, l.opts.Fsync)
}

// fail fails the log after the write error err: it takes no more writes,
// and it records the failure in FailedFile first, so that no later Open
// replays what the failed write left in the page cache as if it were on
// disk. Where that record cannot be written either, the error says so: a
// restart would then open the log.
func (l *Log) fail(err error) {
	if !needsCheck(err) {
		failed := fmt.Errorf("nodelog: write failed (the disk is full), the log takes no more writes until the member restarts: %w", err)
		l.failed.Store(&failed)
		l.opts.Logger.Error("node log: write failed; every later append fails", "err", failed)
		return
	}
	failed := fmt.Errorf("nodelog: write failed, the log takes no more writes until an operator has checked the disk and deleted %s: %w",
		filepath.Join(l.dir, FailedFile), err)
	note := fmt.Sprintf("%s: %v\n", time.Now().UTC().Format(time.RFC3339), err)
	if merr := WriteFile(filepath.Join(l.dir, FailedFile), []byte(note)); merr != nil {
		failed = fmt.Errorf("nodelog: write failed, the log takes no more writes, and the failure could not be recorded in %s (%v): "+
			"a restart would open the log and read what the failed write left as if it were on disk; check the disk before restarting: %w",
			filepath.Join(l.dir, FailedFile), merr, err)
	}
	l.failed.Store(&failed)
	l.opts.Logger.Error("node log: write failed; every later append fails", "err", failed)
}

// errSyncFailed wraps the error of a failed fdatasync of a segment.
var errSyncFailed = errors.New("nodelog: fdatasync failed")

// needsCheck reports whether a failed write needs an operator's check
// before the log opens again: every failed sync does (the kernel may have
// dropped the pages it could not write, and a replay would read them from
// the page cache as if they were on disk), and every failed write but one
// refused for want of space, which wrote nothing a replay could trust
// (an unsynced batch was never acknowledged; a torn one is dropped).
func needsCheck(err error) bool {
	return errors.Is(err, errSyncFailed) || !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT)
}

// collect removes the segments, other than the last, that hold no live
// entry. It first writes a state record that gives every group's range,
// so that a replay drops whatever of theirs the removed segments' records
// had dropped; groups left with no entry and no record are forgotten.
func (l *Log) collect() {
	last := l.segs[len(l.segs)-1]
	var dead, kept []*segment
	for _, s := range l.segs[:len(l.segs)-1] {
		if s.live == 0 {
			dead = append(dead, s)
		} else {
			kept = append(kept, s)
		}
	}
	if len(dead) == 0 {
		return
	}
	kept = append(kept, last)
	var ranges []rangeRec
	var gone []string
	l.mu.RLock() // Group adds groups and opens them
	for name, g := range l.groups {
		if g.empty() && !g.opened && !slices.ContainsFunc(kept, func(s *segment) bool { _, ok := s.groups[name]; return ok }) {
			gone = append(gone, name)
			continue
		}
		ranges = append(ranges, rangeRec{group: name, first: g.first, last: g.last()})
	}
	for name := range l.dropped {
		ranges = append(ranges, rangeRec{group: name, last: tombstone})
	}
	l.mu.RUnlock()
	buf := appendRecord(beginBatch(l.buf[:0]), encodeState(ranges))
	endBatch(buf, 0)
	_, _, err := l.append(buf, false)
	l.buf = buf[:0]
	if err != nil {
		l.fail(err)
		return
	}
	l.mu.Lock()
	l.segs = slices.DeleteFunc(l.segs, func(s *segment) bool { return slices.Contains(dead, s) })
	for _, name := range gone {
		if !l.groups[name].opened {
			delete(l.groups, name)
		}
	}
	l.mu.Unlock()
	for _, s := range dead {
		path := filepath.Join(l.dir, segName(s.seq))
		if err := errors.Join(s.f.Close(), os.Remove(path)); err != nil {
			l.opts.Logger.Warn("node log: remove a segment", "file", path, "err", err)
		}
	}
	// A removed segment that came back after a crash could hold entries of
	// a group forgotten here, which no state record would drop.
	if err := syncDir(l.dir); err != nil {
		l.opts.Logger.Warn("node log: sync the directory after removing segments", "err", err)
	}
}

// WriteFile writes a small file durably: a synced temporary file renamed
// over path, then the directory synced (the log's identity here; a
// member's markers in the replica).
func WriteFile(path string, data []byte) error {
	tmp := path + ".tmp"
	err := os.WriteFile(tmp, data, 0o644)
	if err == nil {
		var f *os.File
		if f, err = os.OpenFile(tmp, os.O_RDWR, 0); err == nil {
			err = errors.Join(f.Sync(), f.Close())
		}
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

// Collectors returns the log's counters for a Prometheus registry: how
// many batches it wrote (each one fdatasync), for how many requests, and
// how many bytes of records.
func (l *Log) Collectors() []prometheus.Collector {
	counter := func(name, help string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v.Load()) })
	}
	return []prometheus.Collector{
		counter("xkeeper_node_log_batches_total", "Batches the node log wrote, each with one fdatasync, for all the members it holds.", &l.batches),
		counter("xkeeper_node_log_requests_total", "Appends and deletes of the members' Raft logs the node log answered.", &l.requests),
		counter("xkeeper_node_log_written_bytes_total", "Bytes of records the node log wrote.", &l.written),
	}
}

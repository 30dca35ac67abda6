// Package nodelog is the Raft log a node shares among the groups it hosts
// (its members of different shards). Every group's appends queue for one
// writer and go into one sequence of segment files, so the node pays one
// write and one fdatasync per batch however many shards it hosts, where a
// log per member pays one each.
//
// Each record names its group. A replay reads the segments in order and
// rebuilds every group's index in memory. Only the last segment may end in
// something other than zeros after its last good record (a batch a crash
// tore before its sync was acknowledged): that tail is zeroed, durably,
// and written over. A bad record in any other segment is damage, and the
// log refuses to open rather than lose what follows it. Segments whose
// entries are all dead (compacted, truncated) are removed after a state
// record that makes what they held irrelevant to a replay.
package nodelog

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

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
	mu     sync.RWMutex
	groups map[string]*group
	segs   []*segment // in order; the last is the one written

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
	min, max uint64
	done     chan error
}

// Open opens the log in dir, creating it if new, and replays it.
func Open(dir string, opts Options) (*Log, error) {
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = DefaultSegmentBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	l := &Log{dir: dir, opts: opts, groups: map[string]*group{}}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	l.lock = lock
	if err := l.open(); err != nil {
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
			return fmt.Errorf("nodelog: %s: segment %s is damaged: no valid record at offset %d, and later segments follow",
				l.dir, segName(seq), seg.size)
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
	if len(l.segs) > 0 {
		return nil // write on after the last segment's last record
	}
	seg, err := l.createSegment(1)
	if err != nil {
		return err
	}
	l.segs = append(l.segs, seg)
	return nil
}

// ID is the log's identity, fixed when its directory was created.
func (l *Log) ID() string { return l.id }

// Group returns the log of the group called name (a member's), for one
// user at a time.
func (l *Log) Group(name string) (*Store, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
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

// Drop deletes every entry of a group no member uses: the segments that
// held only its entries are then removed. It fails if the group is open.
func (l *Log) Drop(name string) error {
	g, err := l.Group(name)
	if err != nil {
		return err
	}
	defer g.Close()
	return g.DeleteRange(0, math.MaxUint64)
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
		buf := l.buf[:0]
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
			if r.delete {
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
		seg, base, err := l.append(buf)
		l.buf = buf[:0]
		l.batches.Add(1)
		l.written.Add(int64(len(buf)))
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

// append writes b, whole records, after the last segment's last record,
// first starting a new segment if b would take the last past
// Options.SegmentBytes, and returns the segment and the offset b went to.
func (l *Log) append(b []byte) (*segment, int64, error) {
	seg := l.segs[len(l.segs)-1]
	if len(b) == 0 {
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

func (l *Log) fail(err error) {
	failed := fmt.Errorf("nodelog: write failed, the log takes no more writes: %w", err)
	l.failed.Store(&failed)
	l.opts.Logger.Error("node log: write failed; every later append fails", "err", err)
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
	l.mu.RUnlock()
	buf := appendRecord(l.buf[:0], encodeState(ranges))
	_, _, err := l.append(buf)
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

package nodelog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A segment file is named by its sequence number, in hex, and begins with
// its magic, which gives its version, and that number. The writer writes
// version 2 (batches, see batchRecLen); version 1 segments, from before,
// are read and never written to.
const (
	segMagic     = "xknlog02"
	segMagicV1   = "xknlog01"
	segHeaderLen = len(segMagic) + 8
	segSuffix    = ".seg"
)

func segName(seq uint64) string { return fmt.Sprintf("%016x%s", seq, segSuffix) }

// segmentFiles lists dir's segment files' sequence numbers, in order.
func segmentFiles(dir string) ([]uint64, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, n := range names {
		seq, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(n), segSuffix), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("nodelog: %s is not a segment file's name", n)
		}
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	return seqs, nil
}

// readSegment reads segment seq of dir into l's groups. It returns the
// segment, open for reading, and whether the file past its last record is
// all zeros (clean: the next record may go there). What is not clean is a
// torn tail, unless a valid batch (in version 1, a valid record) follows
// it: then the segment is damaged and the error wraps ErrDamaged. A file
// too short for its header, or of zeros, is a segment whose creation a
// crash cut short: nil and no error.
func (l *Log) readSegment(seq uint64) (seg *segment, clean bool, err error) {
	path := filepath.Join(l.dir, segName(seq))
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	magic := ""
	if len(data) >= segHeaderLen && binary.LittleEndian.Uint64(data[len(segMagic):]) == seq {
		magic = string(data[:len(segMagic)])
	}
	if magic != segMagic && magic != segMagicV1 {
		if allZero(data) {
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("nodelog: %s is not a segment file (bad header)", path)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, false, err
	}
	seg = &segment{seq: seq, f: f, v1: magic == segMagicV1, zeroed: int64(len(data)), groups: map[string]struct{}{}}
	off, later, err := l.replay(seg, data)
	if err == nil && later >= 0 {
		unit := "batch"
		if seg.v1 {
			unit = "record"
		}
		err = fmt.Errorf("%w: %s: a bad %s at offset %d, and a valid one follows at %d: "+
			"it is not a batch a crash tore (the last one) but damage to synced records; the segment is left as it is, for an operator",
			ErrDamaged, path, unit, off, later)
	}
	if err != nil {
		f.Close()
		return nil, false, err
	}
	seg.size = int64(off)
	return seg, allZero(data[off:]), nil
}

// replay applies the segment's records to l's groups up to the first bad
// one, and returns where they end; later is where a valid batch (or, in
// version 1, record) lies after a bad one, -1 if none does.
func (l *Log) replay(seg *segment, data []byte) (end, later int, err error) {
	off := segHeaderLen
	if seg.v1 {
		for {
			body, n, ok := nextRecord(data[off:])
			if !ok {
				break
			}
			r, err := decode(body)
			if err != nil {
				return off, -1, fmt.Errorf("nodelog: %s at %d: %w", segName(seg.seq), off, err)
			}
			l.apply(r, seg, int64(off), n)
			off += n
		}
		return off, laterRecord(data, off), nil
	}
	for {
		recs, n, ok, err := batchAt(data[off:])
		if err != nil {
			return off, -1, fmt.Errorf("nodelog: %s at %d: %w", segName(seg.seq), off, err)
		}
		if !ok {
			break
		}
		for _, r := range recs {
			l.apply(r.rec, seg, int64(off+r.off), r.n)
		}
		off += n
	}
	return off, laterBatch(data, off), nil
}

// laterBatch returns where a valid batch lies after the bad batch at
// data[bad:], -1 if none does. A torn batch never has one after it; it
// may hold valid records past its bad one (its pages reach the disk in
// any order), so only a batch counts, and one that begins past the end
// the bad batch's record gives, if that is readable.
func laterBatch(data []byte, bad int) int {
	if allZero(data[bad:]) {
		return -1
	}
	from := bad + 1
	if len(data)-bad >= batchRecLen {
		if body, n, ok := nextRecord(data[bad:]); ok && n == batchRecLen && body[0] == kindBatch {
			size := binary.LittleEndian.Uint64(body[1:])
			from = bad + batchRecLen + int(min(size, uint64(len(data))))
		}
	}
	for p := from; p <= len(data)-batchRecLen; p++ {
		if data[p] != batchRecLen-headerLen || data[p+headerLen] != kindBatch {
			continue // the cheap test first: a batch record's length and kind
		}
		if _, _, ok, _ := batchAt(data[p:]); ok {
			return p
		}
	}
	return -1
}

// laterRecord returns where a valid record lies after the bad one at
// data[bad:] of a version-1 segment, -1 if none does. Version 1 cannot
// tell the later records of a torn batch from a later batch, so either
// refuses to open.
func laterRecord(data []byte, bad int) int {
	if allZero(data[bad:]) {
		return -1
	}
	for p := bad + 1; p <= len(data)-headerLen-1; p++ {
		if k := data[p+headerLen]; k < kindEntry || k > kindState {
			continue
		}
		if body, _, ok := nextRecord(data[p:]); ok {
			if _, err := decode(body); err == nil {
				return p
			}
		}
	}
	return -1
}

func allZero(b []byte) bool {
	return len(bytes.Trim(b, "\x00")) == 0
}

// createSegment creates segment seq, durably: its header written and
// synced, and the directory synced.
func (l *Log) createSegment(seq uint64) (*segment, error) {
	path := filepath.Join(l.dir, segName(seq))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	header := binary.LittleEndian.AppendUint64([]byte(segMagic), seq)
	if _, err := f.Write(header); err == nil && l.opts.Fsync {
		if err = f.Sync(); err == nil {
			err = syncDir(l.dir)
		}
	}
	if err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return &segment{seq: seq, f: f, size: int64(segHeaderLen), zeroed: int64(segHeaderLen), groups: map[string]struct{}{}}, nil
}

// The syncs the log makes, variables so that tests can fail or count them.
var (
	syncData = datasync  // a segment's data, after a batch
	syncDir  = syncDirOS // a directory, after entries were added or removed
)

// syncDirOS syncs dir, making the entries added to it or removed from it
// durable.
func syncDirOS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// zeros is what a segment grows by, written after a batch's records when
// they reach the end of the file, so that the file past the last record
// reads as zeros (the end of the records) and most appends overwrite
// blocks already allocated. On this machine's disk that measured neither
// faster nor slower than fallocated space, within its noise.
var zeros = make([]byte, 4<<20)

// write writes b at the segment's end, growing the file by zeros (up to
// grow bytes) when b reaches past it, and syncs the data if sync. b is the
// writer's scratch buffer: the zeros may be appended to it.
func (s *segment) write(b []byte, grow int64, sync bool) error {
	at, n := s.size, int64(len(b))
	if at+n > s.zeroed {
		b = append(b, zeros[:min(grow, int64(len(zeros)))]...)
	}
	if _, err := s.f.WriteAt(b, at); err != nil {
		return err
	}
	s.zeroed = max(s.zeroed, at+int64(len(b)))
	s.size = at + n
	if sync {
		if err := syncData(s.f); err != nil {
			return fmt.Errorf("%w: %w", errSyncFailed, err)
		}
	}
	return nil
}

// zeroTail overwrites the file from the segment's last record to its end
// with zeros, and syncs it if sync, so that the next record can go there
// and no replay reads what a crash left past it.
func (s *segment) zeroTail(sync bool) error {
	for at := s.size; at < s.zeroed; {
		n := min(s.zeroed-at, int64(len(zeros)))
		if _, err := s.f.WriteAt(zeros[:n], at); err != nil {
			return err
		}
		at += n
	}
	if sync {
		return syncData(s.f)
	}
	return nil
}

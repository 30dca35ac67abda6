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
// segMagic and that number.
const (
	segMagic     = "xknlog01"
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
// all zeros (clean: the next record may go there). A file too short for
// its header, or of zeros, is a segment whose creation a crash cut short:
// nil and no error.
func (l *Log) readSegment(seq uint64) (seg *segment, clean bool, err error) {
	path := filepath.Join(l.dir, segName(seq))
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	if len(data) < segHeaderLen || string(data[:len(segMagic)]) != segMagic ||
		binary.LittleEndian.Uint64(data[len(segMagic):]) != seq {
		if allZero(data) {
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("nodelog: %s is not a segment file (bad header)", path)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, false, err
	}
	seg = &segment{seq: seq, f: f, zeroed: int64(len(data)), groups: map[string]struct{}{}}
	off := segHeaderLen
	for {
		body, n, ok := nextRecord(data[off:])
		if !ok {
			break
		}
		r, err := decode(body)
		if err != nil {
			f.Close()
			return nil, false, fmt.Errorf("nodelog: %s at %d: %w", path, off, err)
		}
		l.apply(r, seg, int64(off), n)
		off += n
	}
	seg.size = int64(off)
	return seg, allZero(data[off:]), nil
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

func syncDir(dir string) error {
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
		return datasync(s.f)
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
		return datasync(s.f)
	}
	return nil
}

package nodelog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"

	"github.com/hashicorp/raft"
)

// A segment file holds records, each a header — the body's length and its
// CRC-32C, little-endian uint32s — then the body. A header of zeros ends
// the records: the file past the last record is zeros.
//
// A version-2 segment (segMagic) holds batches, each what one write put
// there between two syncs: a batch record giving the length of the
// records that follow it, then those records. A replay applies a batch
// only whole, and tells a torn tail from damage by what follows a bad
// batch: a batch is written only after the one before it was synced, so
// a valid batch after a bad one means that the bad one had been synced
// (and acknowledged) before it went bad. A version-1 segment (segMagicV1,
// written before batches) holds records alone.
const headerLen = 8

// batchRecLen is the length of a batch record: a header, then kindBatch
// and the length of the batch's records, a little-endian uint64 (fixed,
// so that the writer reserves it before it knows the length).
const batchRecLen = headerLen + 1 + 8

// maxRecord bounds a record's body, so that a garbled length is taken for
// the end of the records rather than allocated; the writer refuses an
// entry whose record would be longer (span.store). A variable for tests.
var maxRecord uint32 = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// The kinds of record, the first byte of a body.
const (
	// kindEntry is one Raft log entry of one group. It drops the group's
	// entries at and after its index, as raft stores an entry only after
	// deleting the ones it replaces.
	kindEntry byte = 1
	// kindDelete drops a group's entries from min to max, a prefix or a
	// suffix of its log (raft's DeleteRange).
	kindDelete byte = 2
	// kindState drops, for every group it lists, the entries outside the
	// range it gives (none if first is 0). It is written before segments
	// are removed, so that what they held no longer matters.
	kindState byte = 3
	// kindBatch begins a batch in a version-2 segment (see batchRecLen).
	kindBatch byte = 4
)

// tombstone is the range a state record gives a group Drop deleted: the
// group's name is never used again (Log.Group refuses it).
const tombstone = math.MaxUint64

// record is a decoded body.
type record struct {
	kind     byte
	group    string
	entry    raft.Log   // kindEntry
	min, max uint64     // kindDelete
	ranges   []rangeRec // kindState
}

// rangeRec is one group's range in a state record.
type rangeRec struct {
	group       string
	first, last uint64
}

var errCorrupt = errors.New("nodelog: malformed record")

// appendRecord appends body as a record (header and body) to buf; body is
// the encoding of one record, appended by encode below.
func appendRecord(buf []byte, encode func([]byte) []byte) []byte {
	start := len(buf)
	buf = append(buf, make([]byte, headerLen)...)
	buf = encode(buf)
	body := buf[start+headerLen:]
	binary.LittleEndian.PutUint32(buf[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(body, castagnoli))
	return buf
}

// beginBatch reserves a batch record's room at the end of buf, for
// endBatch to fill in once the batch's records follow it.
func beginBatch(buf []byte) []byte {
	var room [batchRecLen]byte
	return append(buf, room[:]...)
}

// endBatch fills in the batch record at buf[start:] with the length of
// the records appended after it.
func endBatch(buf []byte, start int) {
	body := buf[start+headerLen : start+batchRecLen]
	body[0] = kindBatch
	binary.LittleEndian.PutUint64(body[1:], uint64(len(buf)-start-batchRecLen))
	binary.LittleEndian.PutUint32(buf[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(body, castagnoli))
}

// batchAt returns the length of the batch at the start of b — its batch
// record and its records — checking every record's CRC and decoding it;
// ok is false unless a whole, valid batch is there. Its error is a record
// whose CRC matches but that does not decode: no tear or rot makes one.
func batchAt(b []byte) (recs []decoded, n int, ok bool, err error) {
	if len(b) < batchRecLen || binary.LittleEndian.Uint32(b) != batchRecLen-headerLen || b[headerLen] != kindBatch {
		return nil, 0, false, nil
	}
	if crc32.Checksum(b[headerLen:batchRecLen], castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, 0, false, nil
	}
	size := binary.LittleEndian.Uint64(b[headerLen+1:])
	if size > uint64(len(b)-batchRecLen) {
		return nil, 0, false, nil
	}
	end := batchRecLen + int(size)
	for off := batchRecLen; off < end; {
		body, rn, ok := nextRecord(b[off:end])
		if !ok {
			return nil, 0, false, nil
		}
		r, err := decode(body)
		if err != nil || r.kind == kindBatch {
			return nil, 0, false, errors.Join(err, fmt.Errorf("%w at %d in a batch", errCorrupt, off))
		}
		recs = append(recs, decoded{rec: r, off: off, n: rn})
		off += rn
	}
	return recs, end, true, nil
}

// decoded is a record read from a batch, at off from the batch's start.
type decoded struct {
	rec record
	off int
	n   int
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func encodeEntry(group string, l *raft.Log) func([]byte) []byte {
	return func(b []byte) []byte {
		b = append(b, kindEntry)
		b = appendString(b, group)
		b = binary.AppendUvarint(b, l.Index)
		b = binary.AppendUvarint(b, l.Term)
		b = append(b, byte(l.Type))
		var at uint64 // nanoseconds since 1970, 0 for none
		if !l.AppendedAt.IsZero() {
			at = uint64(l.AppendedAt.UnixNano())
		}
		b = binary.AppendUvarint(b, at)
		b = appendBytes(b, l.Data)
		return appendBytes(b, l.Extensions)
	}
}

// entryLen is the length of the body encodeEntry makes of l.
func entryLen(group string, l *raft.Log) int {
	head := *l
	head.Data, head.Extensions = nil, nil
	return len(encodeEntry(group, &head)(nil)) - 2*fieldLen(nil) + fieldLen(l.Data) + fieldLen(l.Extensions)
}

// fieldLen is the length appendBytes makes of p.
func fieldLen(p []byte) int { return len(binary.AppendUvarint(nil, uint64(len(p)))) + len(p) }

func encodeDelete(group string, min, max uint64) func([]byte) []byte {
	return func(b []byte) []byte {
		b = append(b, kindDelete)
		b = appendString(b, group)
		b = binary.AppendUvarint(b, min)
		return binary.AppendUvarint(b, max)
	}
}

func encodeState(ranges []rangeRec) func([]byte) []byte {
	return func(b []byte) []byte {
		b = append(b, kindState)
		b = binary.AppendUvarint(b, uint64(len(ranges)))
		for _, r := range ranges {
			b = appendString(b, r.group)
			b = binary.AppendUvarint(b, r.first)
			b = binary.AppendUvarint(b, r.last)
		}
		return b
	}
}

// nextRecord reads the record at the start of b. It returns the body and
// the record's length, or ok false where the records end: a zero header,
// a short or garbled record, a CRC that does not match.
func nextRecord(b []byte) (body []byte, n int, ok bool) {
	if len(b) < headerLen {
		return nil, 0, false
	}
	size := binary.LittleEndian.Uint32(b)
	if size == 0 || size > maxRecord || int(size) > len(b)-headerLen {
		return nil, 0, false
	}
	body = b[headerLen : headerLen+int(size)]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, 0, false
	}
	return body, headerLen + int(size), true
}

// decoder reads a body's fields; the first failure sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errCorrupt
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.err = errCorrupt
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// bytes returns the next length-prefixed field, copied (nil if empty) so
// that it outlives the buffer it was read from.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.err = errCorrupt
		return nil
	}
	var v []byte
	if n > 0 {
		v = append([]byte(nil), d.b[:n]...)
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string { return string(d.bytes()) }

// decode decodes a record's body.
func decode(body []byte) (record, error) {
	d := &decoder{b: body}
	r := record{kind: d.byte()}
	switch r.kind {
	case kindEntry:
		r.group = d.string()
		r.entry.Index = d.uvarint()
		r.entry.Term = d.uvarint()
		r.entry.Type = raft.LogType(d.byte())
		if at := d.uvarint(); at != 0 {
			r.entry.AppendedAt = time.Unix(0, int64(at))
		}
		r.entry.Data = d.bytes()
		r.entry.Extensions = d.bytes()
	case kindDelete:
		r.group = d.string()
		r.min = d.uvarint()
		r.max = d.uvarint()
	case kindState:
		n := d.uvarint()
		for ; n > 0 && d.err == nil; n-- {
			r.ranges = append(r.ranges, rangeRec{group: d.string(), first: d.uvarint(), last: d.uvarint()})
		}
	case kindBatch:
		if len(d.b) < 8 {
			d.err = errCorrupt
		} else {
			d.b = d.b[8:] // the batch's length: see batchAt
		}
	default:
		return r, fmt.Errorf("%w: unknown kind %d", errCorrupt, r.kind)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d bytes after the fields", errCorrupt, len(d.b))
	}
	return r, d.err
}

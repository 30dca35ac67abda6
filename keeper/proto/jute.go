package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// ErrShort is returned when a record needs more bytes than the frame holds.
var ErrShort = errors.New("proto: record truncated")

// ErrLength is returned for a negative or impossible length on the wire.
var ErrLength = errors.New("proto: bad length")

// Encoder appends jute-encoded values to a byte slice.
type Encoder struct{ buf []byte }

// NewEncoder returns an encoder that appends to buf.
func NewEncoder(buf []byte) *Encoder { return &Encoder{buf: buf} }

// Bytes returns everything encoded so far.
func (e *Encoder) Bytes() []byte { return e.buf }

// Int32 appends a big-endian int32.
func (e *Encoder) Int32(v int32) { e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(v)) }

// Int64 appends a big-endian int64.
func (e *Encoder) Int64(v int64) { e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(v)) }

// Bool appends one byte, 1 for true.
func (e *Encoder) Bool(v bool) {
	if v {
		e.buf = append(e.buf, 1)
	} else {
		e.buf = append(e.buf, 0)
	}
}

// Uint8 appends one byte.
func (e *Encoder) Uint8(v uint8) { e.buf = append(e.buf, v) }

// Buffer appends a length-prefixed byte string; nil is encoded as length -1.
func (e *Encoder) Buffer(b []byte) {
	if b == nil {
		e.Int32(-1)
		return
	}
	e.Int32(int32(len(b)))
	e.buf = append(e.buf, b...)
}

// String appends a length-prefixed string. Strings are never sent as null,
// because ClickHouse refuses a length of -1 for them.
func (e *Encoder) String(s string) {
	e.Int32(int32(len(s)))
	e.buf = append(e.buf, s...)
}

// Strings appends a vector of strings.
func (e *Encoder) Strings(v []string) {
	size := 4
	for _, s := range v {
		size += 4 + len(s)
	}
	e.buf = slices.Grow(e.buf, size)
	e.Int32(int32(len(v)))
	for _, s := range v {
		e.String(s)
	}
}

// Decoder reads jute-encoded values from a byte slice. The first error
// sticks: later reads return zero values and Err reports it.
type Decoder struct {
	b   []byte
	err error
}

// NewDecoder returns a decoder over b.
func NewDecoder(b []byte) *Decoder { return &Decoder{b: b} }

// Err returns the first decoding error.
func (d *Decoder) Err() error { return d.err }

// Remaining returns the number of bytes not yet read.
func (d *Decoder) Remaining() int { return len(d.b) }

// Rest returns the unread bytes and consumes them.
func (d *Decoder) Rest() []byte {
	b := d.b
	d.b = nil
	return b
}

func (d *Decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.err = ErrShort
		return nil
	}
	b := d.b[:n:n]
	d.b = d.b[n:]
	return b
}

// Int32 reads a big-endian int32.
func (d *Decoder) Int32() int32 {
	b := d.take(4)
	if b == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(b))
}

// Int64 reads a big-endian int64.
func (d *Decoder) Int64() int64 {
	b := d.take(8)
	if b == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}

// Bool reads one byte.
func (d *Decoder) Bool() bool {
	b := d.take(1)
	return b != nil && b[0] != 0
}

// Uint8 reads one byte.
func (d *Decoder) Uint8() uint8 {
	b := d.take(1)
	if b == nil {
		return 0
	}
	return b[0]
}

// length reads a length prefix and checks that min*n bytes remain.
func (d *Decoder) length(min int) (int, bool) {
	n := d.Int32()
	if d.err != nil {
		return 0, false
	}
	if n == -1 {
		return -1, true
	}
	if n < 0 || int64(n)*int64(min) > int64(len(d.b)) {
		d.err = fmt.Errorf("%w: %d with %d bytes left", ErrLength, n, len(d.b))
		return 0, false
	}
	return int(n), true
}

// Buffer reads a length-prefixed byte string; length -1 yields nil. The
// result aliases the decoder's input.
func (d *Decoder) Buffer() []byte {
	n, ok := d.length(1)
	if !ok || n < 0 {
		return nil
	}
	return d.take(n)
}

// String reads a length-prefixed string; length -1 yields "".
func (d *Decoder) String() string { return string(d.Buffer()) }

// Strings reads a vector of strings; length -1 yields nil.
func (d *Decoder) Strings() []string {
	n, ok := d.length(4)
	if !ok || n < 0 {
		return nil
	}
	v := make([]string, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		v = append(v, d.String())
	}
	return v
}

// Record is a jute record: it knows how to encode and decode itself.
type Record interface {
	Encode(e *Encoder)
	Decode(d *Decoder)
}

// Marshal encodes r into a new byte slice.
func Marshal(r Record) []byte {
	e := NewEncoder(nil)
	r.Encode(e)
	return e.Bytes()
}

// Unmarshal decodes b into r and requires every byte to be consumed.
func Unmarshal(b []byte, r Record) error {
	d := NewDecoder(b)
	r.Decode(d)
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("proto: %d trailing bytes after %T", len(d.b), r)
	}
	return nil
}

// Raw is a record already encoded: Encode appends its bytes as they are,
// Decode takes every byte left. It carries a reply body encoded elsewhere
// (a leader's result sent to a follower) to code that writes records.
type Raw []byte

// Encode appends the bytes unchanged.
func (r Raw) Encode(e *Encoder) { e.buf = append(e.buf, r...) }

// Decode takes the rest of the input.
func (r *Raw) Decode(d *Decoder) { *r = append((*r)[:0], d.Rest()...) }

package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ErrFrameTooLarge is returned for a frame longer than the packet limit.
var ErrFrameTooLarge = errors.New("proto: frame exceeds the maximum packet size")

// ReadFrame reads one length-prefixed frame of at most max bytes. The
// returned slice is freshly allocated only after the length is checked.
func ReadFrame(r io.Reader, max int) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	return ReadFrameBody(r, int32(binary.BigEndian.Uint32(h[:])), max)
}

// ReadFrameBody reads the body of a frame whose length prefix n was already
// read.
func ReadFrameBody(r io.Reader, n int32, max int) ([]byte, error) {
	if n < 0 || int(n) > max {
		return nil, fmt.Errorf("%w: %d > %d", ErrFrameTooLarge, n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// AppendFrame appends the frame holding the given records, length first.
func AppendFrame(buf []byte, recs ...Record) []byte {
	start := len(buf)
	buf = append(buf, 0, 0, 0, 0)
	e := NewEncoder(buf)
	for _, r := range recs {
		r.Encode(e)
	}
	buf = e.Bytes()
	binary.BigEndian.PutUint32(buf[start:], uint32(len(buf)-start-4))
	return buf
}

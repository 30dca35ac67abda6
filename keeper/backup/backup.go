// Package backup is the file a shard's backup is kept in: what `xkeeper
// snapshot save` writes and `xkeeper snapshot restore` reads. A backup is
// a header that says what it holds (shard, member, zxid, official time)
// and the state machine's snapshot, cut into length-prefixed chunks and
// closed by a SHA-256 of everything before it, so a file cut short or
// damaged is refused rather than restored.
package backup

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/xkeeper/xkeeper/keeper/fsm"
)

// magic opens every backup; the digit is the format's version.
const magic = "XKBACKUP1\n"

// maxChunk bounds a chunk, and so what a reader allocates at once.
const maxChunk = 1 << 20

// ErrCorrupt is returned for a backup that is cut short, damaged, or not a
// backup at all.
var ErrCorrupt = errors.New("backup: not a complete xkeeper backup")

// Header says what a backup holds.
type Header struct {
	Shard        string    `json:"shard"`            // the shard it was saved from
	Member       string    `json:"member"`           // the member that wrote it
	Zxid         int64     `json:"zxid"`             // the last write it holds
	OfficialTime int64     `json:"official_time_ms"` // the shard's official time then, Unix ms
	Taken        time.Time `json:"taken"`            // the member's wall clock then
}

// Writer writes one backup. Close writes the checksum: a backup whose
// writer was not closed does not read back.
type Writer struct {
	w   io.Writer
	sum hash.Hash
	buf []byte
}

// NewWriter writes h and returns the writer of the snapshot that follows.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	hj, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	bw := &Writer{w: w, sum: sha256.New(), buf: make([]byte, 0, maxChunk)}
	if err := bw.emit(append(append([]byte(magic), hj...), '\n')); err != nil {
		return nil, err
	}
	return bw, nil
}

func (w *Writer) emit(p []byte) error {
	w.sum.Write(p)
	_, err := w.w.Write(p)
	return err
}

// Write buffers p, writing every full chunk.
func (w *Writer) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), maxChunk-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == maxChunk {
			if err := w.flush(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

func (w *Writer) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	var l [4]byte
	binary.BigEndian.PutUint32(l[:], uint32(len(w.buf)))
	err := w.emit(l[:])
	if err == nil {
		err = w.emit(w.buf)
	}
	w.buf = w.buf[:0]
	return err
}

// Close writes the last chunk, the end mark and the checksum.
func (w *Writer) Close() error {
	if err := w.flush(); err != nil {
		return err
	}
	if err := w.emit(make([]byte, 4)); err != nil {
		return err
	}
	_, err := w.w.Write(w.sum.Sum(nil))
	return err
}

// Write writes a whole backup of snap.
func Write(w io.Writer, h Header, snap *fsm.Snapshot) error {
	bw, err := NewWriter(w, h)
	if err != nil {
		return err
	}
	if err := snap.Write(bw); err != nil {
		return err
	}
	return bw.Close()
}

// Reader reads one backup's snapshot. Its Read returns io.EOF only after
// the checksum matched, and ErrCorrupt if it did not.
type Reader struct {
	Header Header
	r      *bufio.Reader
	sum    hash.Hash
	left   int // bytes of the current chunk not yet read
	done   bool
}

// NewReader reads the header of the backup in r.
func NewReader(r io.Reader) (*Reader, error) {
	br := &Reader{r: bufio.NewReaderSize(r, 64<<10), sum: sha256.New()} // the header line fits the buffer
	head, err := br.r.Peek(len(magic))
	if err != nil || string(head) != magic {
		return nil, fmt.Errorf("%w: it does not begin with %q", ErrCorrupt, magic[:len(magic)-1])
	}
	br.sum.Write([]byte(magic))
	br.r.Discard(len(magic))
	line, err := br.r.ReadSlice('\n')
	if err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	br.sum.Write(line)
	if err := json.Unmarshal(line, &br.Header); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	return br, nil
}

// Read implements io.Reader over the snapshot.
func (r *Reader) Read(p []byte) (int, error) {
	if r.done {
		return 0, io.EOF
	}
	if r.left == 0 {
		var l [4]byte
		if err := r.full(l[:]); err != nil {
			return 0, err
		}
		r.sum.Write(l[:])
		r.left = int(binary.BigEndian.Uint32(l[:]))
		if r.left > maxChunk {
			return 0, fmt.Errorf("%w: a chunk of %d bytes", ErrCorrupt, r.left)
		}
		if r.left == 0 {
			return 0, r.end()
		}
	}
	p = p[:min(len(p), r.left)]
	n, err := r.r.Read(p)
	r.sum.Write(p[:n])
	r.left -= n
	if err == io.EOF {
		err = fmt.Errorf("%w: it ends inside a chunk", ErrCorrupt)
	}
	return n, err
}

func (r *Reader) full(p []byte) error {
	if _, err := io.ReadFull(r.r, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: it is cut short", ErrCorrupt)
		}
		return err
	}
	return nil
}

// end checks the checksum after the end mark.
func (r *Reader) end() error {
	want := make([]byte, sha256.Size)
	if err := r.full(want); err != nil {
		return err
	}
	if string(want) != string(r.sum.Sum(nil)) {
		return fmt.Errorf("%w: its checksum does not match", ErrCorrupt)
	}
	r.done = true
	return io.EOF
}

// Sum returns the backup's checksum once the snapshot was read to its end:
// what tells one backup from another.
func (r *Reader) Sum() []byte {
	if !r.done {
		return nil
	}
	return r.sum.Sum(nil)
}

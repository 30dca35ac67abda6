package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// header is the header of the backups the tests write.
var header = Header{Shard: "a", Member: "a1", Zxid: 42, OfficialTime: 1700000000000, Taken: time.Unix(1700000000, 0).UTC()}

// write writes a backup of body under h, in uneven writes.
func write(t testing.TB, h Header, body []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := NewWriter(&b, h)
	require.NoError(t, err)
	for len(body) > 0 { // uneven writes, across chunk boundaries
		k := min(len(body), 300_001)
		_, err := w.Write(body[:k])
		require.NoError(t, err)
		body = body[k:]
	}
	require.NoError(t, w.Close())
	return b.Bytes()
}

func TestRoundTrip(t *testing.T) {
	for _, size := range []int{0, 1, maxChunk, 3*maxChunk + 17} {
		body := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		r, err := NewReader(bytes.NewReader(write(t, header, body)))
		require.NoError(t, err)
		assertSameHeader(t, header, r.Header)
		assert.Nil(t, r.Sum(), "no checksum before the end")
		got, err := io.ReadAll(r)
		require.NoError(t, err, "size %d", size)
		assert.Equal(t, body, got)
		assert.Len(t, r.Sum(), 32)
	}
}

// TestDamageIsRefused: a backup cut anywhere, or with any byte changed,
// reads with ErrCorrupt, never as a shorter or different snapshot.
func TestDamageIsRefused(t *testing.T) {
	file := write(t, header, bytes.Repeat([]byte("snapshot"), 100_000))
	read := func(b []byte) error {
		r, err := NewReader(bytes.NewReader(b))
		if err != nil {
			return err
		}
		_, err = io.ReadAll(r)
		return err
	}
	for _, cut := range []int{0, 5, len(magic) + 3, len(file) / 2, len(file) - 33, len(file) - 1} {
		assert.ErrorIs(t, read(file[:cut]), ErrCorrupt, "cut at %d", cut)
	}
	for _, at := range []int{len(magic) + 5, len(file) / 3, len(file) - 40, len(file) - 2} {
		bad := bytes.Clone(file)
		bad[at] ^= 0x40
		assert.ErrorIs(t, read(bad), ErrCorrupt, "byte %d changed", at)
	}
	assert.ErrorIs(t, read([]byte("XKSNAP02 a raw snapshot")), ErrCorrupt)
}

// FuzzReader: any bytes read as a backup give its header and snapshot, or
// ErrCorrupt; never a panic, never more than was written. What reads back
// is a round trip: the header and snapshot read, written again by Writer,
// read back the same (the chunks may be cut elsewhere, so the bytes and
// the checksum may differ; the values may not).
func FuzzReader(f *testing.F) {
	var b bytes.Buffer
	w, err := NewWriter(&b, Header{Shard: "a", Zxid: 1})
	if err != nil {
		f.Fatal(err)
	}
	w.Write([]byte("snapshot bytes"))
	w.Close()
	f.Add(b.Bytes())
	f.Add([]byte(magic + "{}\n"))
	f.Add(byHand(`{"shard":"a","member":"a1","zxid":7,"official_time_ms":1700000000000,"taken":"2024-01-02T03:04:05.000000006+01:30"}`,
		"a snapshot", " in two chunks"))
	f.Add(write(f, Header{Shard: "ü", Member: "m\n", Zxid: -1, Taken: time.Date(2024, 1, 2, 3, 4, 5, 6, time.FixedZone("", 5400))}, nil))
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := NewReader(bytes.NewReader(in))
		if err != nil {
			require.ErrorIs(t, err, ErrCorrupt)
			return
		}
		out, err := io.ReadAll(r)
		if err != nil {
			require.ErrorIs(t, err, ErrCorrupt)
			assert.Nil(t, r.Sum(), "a checksum of a backup that did not read whole")
			return
		}
		require.LessOrEqual(t, len(out), len(in))
		require.Len(t, r.Sum(), sha256.Size)
		again := read(t, write(t, r.Header, out))
		assert.Equal(t, out, again.body, "the snapshot written again")
		assertSameHeader(t, r.Header, again.Header)
	})
}

// byHand lays out a backup by the format, not by Writer: the header
// line, each chunk with its length, the end mark, the SHA-256.
func byHand(header string, chunks ...string) []byte {
	b := []byte(magic + header + "\n")
	for _, c := range chunks {
		b = binary.BigEndian.AppendUint32(b, uint32(len(c)))
		b = append(b, c...)
	}
	b = append(b, 0, 0, 0, 0)
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// backupRead is a backup read whole.
type backupRead struct {
	Header
	body []byte
}

// read reads a backup that must read back whole.
func read(t testing.TB, file []byte) backupRead {
	t.Helper()
	r, err := NewReader(bytes.NewReader(file))
	require.NoError(t, err)
	body, err := io.ReadAll(r)
	require.NoError(t, err)
	return backupRead{Header: r.Header, body: body}
}

// assertSameHeader compares headers as values: the same instant and
// offset for Taken, whatever *time.Location JSON gave each.
func assertSameHeader(t *testing.T, want, got Header) {
	t.Helper()
	assert.True(t, want.Taken.Equal(got.Taken), "taken %v, written again %v", want.Taken, got.Taken)
	_, wo := want.Taken.Zone()
	_, goff := got.Taken.Zone()
	assert.Equal(t, wo, goff, "offset of taken")
	want.Taken, got.Taken = time.Time{}, time.Time{}
	assert.Equal(t, want, got)
}

package backup

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func write(t *testing.T, body []byte) []byte {
	var b bytes.Buffer
	w, err := NewWriter(&b, Header{Shard: "a", Member: "a1", Zxid: 42, OfficialTime: 1700000000000, Taken: time.Unix(1700000000, 0).UTC()})
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
		r, err := NewReader(bytes.NewReader(write(t, body)))
		require.NoError(t, err)
		assert.Equal(t, "a", r.Header.Shard)
		assert.Equal(t, int64(42), r.Header.Zxid)
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
	file := write(t, bytes.Repeat([]byte("snapshot"), 100_000))
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

// FuzzReader: any bytes read as a backup give its snapshot or an error,
// never a panic, and a reader never returns more than was written.
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
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := NewReader(bytes.NewReader(in))
		if err != nil {
			return
		}
		out, err := io.ReadAll(r)
		if err == nil && len(out) > len(in) {
			t.Fatalf("read %d bytes from %d", len(out), len(in))
		}
	})
}

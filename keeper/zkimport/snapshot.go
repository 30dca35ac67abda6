package zkimport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/adler32"
	"io"
	"math"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// File magics of ZooKeeper's data directory ("ZKSN", "ZKLG"); both
// formats are version 2.
const (
	snapshotMagic = 0x5a4b534e
	logMagic      = 0x5a4b4c47
	formatVersion = 2
)

// openACL is the ACL map id ZooKeeper gives world:anyone with every
// permission (ReferenceCountedACLCache.OPEN_UNSAFE_ACL_ID).
const openACL = -1

// maxField bounds a string or buffer in ZooKeeper's files (jute.maxbuffer
// is far smaller; this only keeps a damaged length from allocating).
const maxField = 64 << 20

// juteReader reads jute's big-endian encoding from a stream, summing what
// it reads with Adler-32 as ZooKeeper's checked streams do. The first
// error sticks.
type juteReader struct {
	r   *bufio.Reader
	sum hash.Hash32
	err error
}

func newJuteReader(r io.Reader) *juteReader {
	return &juteReader{r: bufio.NewReaderSize(r, 1<<20), sum: adler32.New()}
}

func (j *juteReader) bytes(n int) []byte {
	if j.err != nil {
		return nil
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(j.r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = errors.New("the file ends early")
		}
		j.err = err
		return nil
	}
	j.sum.Write(b)
	return b
}

func (j *juteReader) i32() int32 {
	b := j.bytes(4)
	if b == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(b))
}

func (j *juteReader) i64() int64 {
	b := j.bytes(8)
	if b == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}

// buf reads a length-prefixed buffer; -1 is null.
func (j *juteReader) buf() []byte {
	n := j.i32()
	switch {
	case j.err != nil || n == -1:
		return nil
	case n < 0 || n > maxField:
		j.err = fmt.Errorf("a field of %d bytes", n)
		return nil
	}
	return j.bytes(int(n))
}

func (j *juteReader) str() string { return string(j.buf()) }

func (j *juteReader) acls() []proto.ACL {
	n := j.i32()
	if j.err != nil || n < 0 || n > math.MaxUint16 {
		if j.err == nil {
			j.err = fmt.Errorf("an ACL of %d entries", n)
		}
		return nil
	}
	acl := make([]proto.ACL, n)
	for i := range acl {
		acl[i] = proto.ACL{Perms: j.i32(), ID: proto.ID{Scheme: j.str(), ID: j.str()}}
	}
	return acl
}

// header reads a file header and checks its magic and version.
func (j *juteReader) header(magic int32, what string) {
	m, v := j.i32(), j.i32()
	j.i64() // dbid
	if j.err == nil && (m != magic || v != formatVersion) {
		j.err = fmt.Errorf("not a ZooKeeper %s of format version 2 (magic %#x, version %d)", what, m, v)
	}
}

// readSnapshot reads a ZooKeeper snapshot: the header, the sessions, the
// ACL map, the znodes in tree order up to the "/" that ends them, and the
// Adler-32 of everything before it.
func readSnapshot(r io.Reader, zxid int64) (*dataTree, error) {
	j := newJuteReader(r)
	j.header(snapshotMagic, "snapshot")
	for n := j.i32(); n > 0 && j.err == nil; n-- {
		j.i64() // session id
		j.i32() // timeout
	}
	acls := map[int64][]proto.ACL{openACL: proto.WorldACL(proto.PermAll)}
	for n := j.i32(); n > 0 && j.err == nil; n-- {
		id := j.i64()
		acls[id] = j.acls()
	}
	t := newDataTree()
	for path := j.str(); path != "/" && j.err == nil; path = j.str() {
		data, aclID := j.buf(), j.i64()
		var st proto.Stat
		st.Czxid, st.Mzxid, st.Ctime, st.Mtime = j.i64(), j.i64(), j.i64(), j.i64()
		st.Version, st.Cversion, st.Aversion = j.i32(), j.i32(), j.i32()
		st.EphemeralOwner, st.Pzxid = j.i64(), j.i64()
		acl, ok := acls[aclID]
		if !ok && j.err == nil {
			j.err = fmt.Errorf("znode %q has ACL %d, which the snapshot does not define", path, aclID)
		}
		if path == "" {
			path = "/"
		}
		t.put(path, &znode{data: data, acl: acl, stat: st})
		t.time = max(t.time, st.Mtime, st.Ctime)
	}
	want := j.sum.Sum32()
	got := j.i64()
	if j.err != nil {
		return nil, fmt.Errorf("zkimport: snapshot: %w", j.err)
	}
	if uint32(got) != want {
		return nil, fmt.Errorf("zkimport: snapshot: checksum %#x, computed %#x: the file is damaged", got, want)
	}
	t.zxid = zxid
	return t, nil
}

package zkimport

import (
	"bytes"
	"encoding/binary"
	"hash/adler32"
	"testing"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// header is a file header of ZooKeeper's data directory.
func header(magic int32) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(magic))
	b = binary.BigEndian.AppendUint32(b, formatVersion)
	return binary.BigEndian.AppendUint64(b, 0)
}

// minimalSnapshot is a snapshot of the root alone.
func minimalSnapshot() []byte {
	e := proto.NewEncoder(header(snapshotMagic))
	e.Int32(0) // sessions
	e.Int32(0) // ACL map
	e.String("")
	e.Buffer(nil)
	e.Int64(openACL)
	for range 4 {
		e.Int64(0) // czxid, mzxid, ctime, mtime
	}
	e.Int32(0)
	e.Int32(0)
	e.Int32(0)
	e.Int64(0) // ephemeral owner
	e.Int64(0) // pzxid
	e.String("/")
	b := e.Bytes()
	return binary.BigEndian.AppendUint64(b, uint64(adler32.Checksum(b)))
}

// logWith is a transaction log of one create of /x.
func logWith() []byte {
	txn := proto.NewEncoder(nil)
	txn.Int64(1)  // session
	txn.Int32(1)  // cxid
	txn.Int64(1)  // zxid: the one after the snapshot's
	txn.Int64(99) // time
	txn.Int32(txnCreate)
	txn.String("/x")
	txn.Buffer([]byte("v"))
	txn.Int32(0) // ACL
	txn.Bool(false)
	txn.Int32(-1)
	rec := txn.Bytes()
	b := binary.BigEndian.AppendUint64(header(logMagic), uint64(adler32.Checksum(rec)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(rec)))
	return append(append(b, rec...), endOfRecord)
}

// FuzzReadSnapshot: any bytes read as a snapshot give a tree or an error,
// never a panic.
func FuzzReadSnapshot(f *testing.F) {
	f.Add(minimalSnapshot())
	f.Add(header(snapshotMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		readSnapshot(bytes.NewReader(b), 0)
	})
}

// FuzzReplayLog: any bytes replayed as a log onto a tree apply what they
// can or stop with an error, never a panic.
func FuzzReplayLog(f *testing.F) {
	f.Add(logWith())
	f.Add(header(logMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		tree, err := readSnapshot(bytes.NewReader(minimalSnapshot()), 0)
		if err != nil {
			t.Fatal(err)
		}
		replayLog(bytes.NewReader(b), tree)
		tree.state()
	})
}

func TestSeedsReadBack(t *testing.T) {
	tree, err := readSnapshot(bytes.NewReader(minimalSnapshot()), 0)
	if err != nil {
		t.Fatal(err)
	}
	n, err := replayLog(bytes.NewReader(logWith()), tree)
	if err != nil || n != 1 || tree.nodes["/x"] == nil {
		t.Fatalf("replayed %d, %v; /x %v", n, err, tree.nodes["/x"])
	}
}

package nodelog

import (
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
)

// BenchmarkAppend appends 200-byte entries one at a time, fsync on, to a
// node log group and to raft-wal: what one member alone pays per append
// with each (bench/ TestMeasureLogStore measures them under raft), and
// what a node log append costs without the fsync.
//
//	go test ./keeper/nodelog -run - -bench Append -benchtime 3s
func BenchmarkAppend(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) raft.LogStore
	}{
		{"node", func(b *testing.B) raft.LogStore { return benchGroup(b, Options{Fsync: true}) }},
		// the log's own cost, without the disk's
		{"node-nofsync", func(b *testing.B) raft.LogStore { return benchGroup(b, Options{}) }},
		{"wal", func(b *testing.B) raft.LogStore {
			w, err := wal.Open(b.TempDir(), wal.WithLogger(hclog.NewNullLogger()))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { w.Close() })
			return w
		}},
	}
	for _, store := range stores {
		b.Run(store.name, func(b *testing.B) {
			s := store.open(b)
			data := make([]byte, 200)
			var i uint64
			for b.Loop() {
				i++
				if err := s.StoreLogs([]*raft.Log{{Index: i, Term: 1, Type: raft.LogCommand, Data: data}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchGroup opens a group of a new node log with opts.
func benchGroup(b *testing.B, opts Options) raft.LogStore {
	l, err := Open(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	s, err := l.Group("g")
	if err != nil {
		b.Fatal(err)
	}
	return s
}

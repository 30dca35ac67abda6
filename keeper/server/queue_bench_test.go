package server

import (
	"fmt"
	"testing"

	"github.com/xkeeper/xkeeper/keeper/fsm"
)

// BenchmarkQueueReply: a reply queued and taken by the writer, as each
// request's is: the queue's cost per reply.
func BenchmarkQueueReply(b *testing.B) {
	q := newOutq(64<<20, nil)
	frame := make([]byte, 120)
	var buf [][]byte
	b.ReportAllocs()
	for b.Loop() {
		q.add(&slot{ready: true, frame: frame})
		frames, _, cost, _ := q.next(buf[:0])
		q.release(cost)
		buf = frames
	}
}

// BenchmarkQueueNotification: a notification queued and taken by the
// writer.
func BenchmarkQueueNotification(b *testing.B) {
	q := newOutq(64<<20, nil)
	frame := make([]byte, 60)
	var buf [][]byte
	b.ReportAllocs()
	for b.Loop() {
		q.notify(frame)
		frames, _, cost, _ := q.next(buf[:0])
		q.release(cost)
		buf = frames
	}
}

// BenchmarkWatchAdd: a read's watch set again on one of 1,000 paths, as a
// client that re-reads what it watches does.
func BenchmarkWatchAdd(b *testing.B) {
	w := newWatches(100_000, 10_000_000)
	c := &conn{}
	paths := make([]string, 1000)
	for i := range paths {
		paths[i] = fmt.Sprintf("/w%d", i)
	}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		w.add(fsm.WatchData, paths[i%len(paths)], c)
		i++
	}
}

package server

import (
	"sync"
	"sync/atomic"
)

// slot is one reply in request order. A write's slot is filled when the
// member applies the write; a read's slot is filled at once.
type slot struct {
	frame []byte
	// A reply sent in parts: frame, then these (see
	// proto.ChildrenResponse.AppendFrameParts), so that a child list the
	// state machine keeps encoded is sent without a copy per read.
	vector, tail []byte
	ready        bool
	close        bool  // close the connection once this slot is sent
	at           int64 // when it became ready, in the queue's sequence
	done         chan struct{}
}

// note is a watch notification and when it was queued.
type note struct {
	frame []byte
	at    int64
}

// outq orders what a connection sends: replies strictly in request order,
// and watch notifications in the order things happened. A notification
// goes after every reply that was ready before it and before every reply
// that becomes ready after it: never ahead of a read reply that registered
// its watch, and ahead of the reply of the write that fired it, as in
// ZooKeeper.
//
// It also counts the bytes it holds for the connection: the cost of every
// reply and notification queued and not yet written to the socket (those
// next handed to the writer count until the writer releases them). Past
// limit (0: none) it calls over, which
// closes the connection: a client that does not read cannot make the
// member hold more for it than that, whether it pipelines writes, reads
// one at a time or watches what others write.
type outq struct {
	mu     sync.Mutex
	slots  []*slot
	notes  []note
	seq    int64
	wake   chan struct{}
	closed bool

	queued atomic.Int64
	limit  int64
	over   func()
}

// queuedOverhead is what a queued reply or notification costs beside its
// frame (the note or slot, the frame's allocation): counted, so that
// a flood of tiny notifications is bounded too.
const queuedOverhead = 64

func newOutq(limit int64, over func()) *outq {
	return &outq{wake: make(chan struct{}, 1), limit: limit, over: over}
}

// cost is what a ready slot counts for in the queue: its frames and the
// overhead, or nothing if it has none to send.
func (s *slot) cost() int {
	if s.frame == nil {
		return 0
	}
	return len(s.frame) + len(s.vector) + len(s.tail) + queuedOverhead
}

// noteCost is what a notification counts for in the queue.
func noteCost(frame []byte) int { return len(frame) + queuedOverhead }

// charge counts cost more queued, and reports whether that passes the
// limit. What comes after the queue shut is never sent, and is not
// counted. The caller holds mu.
func (q *outq) charge(cost int) bool {
	if q.limit <= 0 || cost == 0 || q.closed {
		return false
	}
	return q.queued.Add(int64(cost)) > q.limit
}

// release uncounts what the writer wrote: the cost next returned with it.
func (q *outq) release(cost int) {
	if q.limit > 0 {
		q.queued.Add(-int64(cost))
	}
}

// overflowed calls over; the caller holds no lock (over closes the
// connection, which shuts the queue).
func (q *outq) overflowed() {
	if q.over != nil {
		q.over()
	}
}

func (q *outq) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// push appends a reply slot and wakes the writer if the slot is ready:
// an empty slot has nothing to send until fill.
func (q *outq) push(s *slot) {
	q.add(s)
	if s.ready {
		q.signal()
	}
}

// add appends a reply slot without waking the writer: for the reader's own
// replies, which it sends itself (conn.sendNow).
func (q *outq) add(s *slot) {
	q.mu.Lock()
	over := false
	if s.ready {
		q.seq++
		s.at = q.seq
		over = q.charge(s.cost())
	}
	q.slots = append(q.slots, s)
	q.mu.Unlock()
	if over {
		q.overflowed()
	}
}

// fill completes a slot.
func (q *outq) fill(s *slot, frame []byte, closeAfter bool) {
	q.mu.Lock()
	q.seq++
	s.frame, s.ready, s.close, s.at = frame, true, s.close || closeAfter, q.seq
	over := q.charge(s.cost())
	q.mu.Unlock()
	if s.done != nil {
		close(s.done)
	}
	if over {
		q.overflowed()
	}
	q.signal()
}

// notify appends a notification; it never blocks.
func (q *outq) notify(frame []byte) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.seq++
	q.notes = append(q.notes, note{frame: frame, at: q.seq})
	over := q.charge(noteCost(frame))
	q.mu.Unlock()
	if over {
		q.overflowed()
	}
	q.signal()
}

// next returns the frames ready to send, in order (a reply in parts
// counts once in messages), their cost (for release once written), and
// whether the connection must close after them.
func (q *outq) next(buf [][]byte) (frames [][]byte, messages, cost int, closeNow bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if len(q.slots) > 0 && q.slots[0].ready && (len(q.notes) == 0 || q.slots[0].at < q.notes[0].at) {
			s := q.slots[0]
			q.slots[0] = nil
			q.slots = q.slots[1:]
			cost += s.cost()
			if s.frame != nil {
				buf = append(buf, s.frame)
				messages++
			}
			if s.vector != nil {
				buf = append(buf, s.vector, s.tail)
			}
			if s.close {
				return buf, messages, cost, true
			}
			continue
		}
		if len(q.notes) == 0 {
			return buf, messages, cost, false
		}
		buf = append(buf, q.notes[0].frame)
		cost += noteCost(q.notes[0].frame)
		messages++
		q.notes[0] = note{}
		q.notes = q.notes[1:]
	}
}

func (q *outq) shut() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

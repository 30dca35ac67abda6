package server

import "sync"

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
type outq struct {
	mu     sync.Mutex
	slots  []*slot
	notes  []note
	seq    int64
	wake   chan struct{}
	closed bool
}

func newOutq() *outq { return &outq{wake: make(chan struct{}, 1)} }

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
	if s.ready {
		q.seq++
		s.at = q.seq
	}
	q.slots = append(q.slots, s)
	q.mu.Unlock()
}

// fill completes a slot.
func (q *outq) fill(s *slot, frame []byte, closeAfter bool) {
	q.mu.Lock()
	q.seq++
	s.frame, s.ready, s.close, s.at = frame, true, s.close || closeAfter, q.seq
	q.mu.Unlock()
	if s.done != nil {
		close(s.done)
	}
	q.signal()
}

// notify appends a notification; it never blocks. It reports false when
// the connection has fallen too far behind.
func (q *outq) notify(frame []byte) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return true
	}
	if len(q.notes) > maxQueuedNotes {
		return false
	}
	q.seq++
	q.notes = append(q.notes, note{frame: frame, at: q.seq})
	q.signal()
	return true
}

const maxQueuedNotes = 100000

// next returns the frames ready to send, in order (a reply in parts
// counts once in messages), and whether the connection must close after
// them.
func (q *outq) next(buf [][]byte) (frames [][]byte, messages int, closeNow bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if len(q.slots) > 0 && q.slots[0].ready && (len(q.notes) == 0 || q.slots[0].at < q.notes[0].at) {
			s := q.slots[0]
			q.slots[0] = nil
			q.slots = q.slots[1:]
			if s.frame != nil {
				buf = append(buf, s.frame)
				messages++
			}
			if s.vector != nil {
				buf = append(buf, s.vector, s.tail)
			}
			if s.close {
				return buf, messages, true
			}
			continue
		}
		if len(q.notes) == 0 {
			return buf, messages, false
		}
		buf = append(buf, q.notes[0].frame)
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

package server

import "sync"

// slot is one reply in request order. A write's slot is filled when the
// member applies the write; a read's slot is filled at once.
type slot struct {
	frame []byte
	ready bool
	close bool // close the connection once this slot is sent
	done  chan struct{}
}

// outq orders what a connection sends: replies strictly in request order,
// and watch notifications as soon as every reply before them has gone or
// the next reply is still waiting for its write to apply (so a
// notification never overtakes a read reply, and a client always has the
// watch registered before the event arrives).
type outq struct {
	mu     sync.Mutex
	slots  []*slot
	notes  [][]byte
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

// push appends a reply slot.
func (q *outq) push(s *slot) {
	q.mu.Lock()
	q.slots = append(q.slots, s)
	q.mu.Unlock()
	q.signal()
}

// fill completes a slot.
func (q *outq) fill(s *slot, frame []byte, closeAfter bool) {
	q.mu.Lock()
	s.frame, s.ready, s.close = frame, true, s.close || closeAfter
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
	q.notes = append(q.notes, frame)
	q.signal()
	return true
}

const maxQueuedNotes = 100000

// next returns frames ready to send, in order, and whether the connection
// must close after them.
func (q *outq) next(buf [][]byte) ([][]byte, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		for len(q.slots) > 0 && q.slots[0].ready {
			s := q.slots[0]
			q.slots[0] = nil
			q.slots = q.slots[1:]
			if s.frame != nil {
				buf = append(buf, s.frame)
			}
			if s.close {
				return buf, true
			}
		}
		if len(q.notes) == 0 {
			return buf, false
		}
		buf = append(buf, q.notes...)
		q.notes = q.notes[:0]
	}
}

func (q *outq) shut() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

package server

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// writes sends a connection's writes to the replica and, in delay mode,
// sends again, in their order, those the state machine held back for a
// pending transaction's lock (fsm.ErrDelayed): the lock is waited out up
// to the bound, however late it was taken, and the connection's writes
// still apply in the order it sent them.
type writes struct {
	c *conn
	// sending orders submissions: the reader's and the resender's. The
	// apply loop, which delivers results, never takes it: a submission may
	// block on a full proposal queue that only a running apply loop drains.
	sending  sync.Mutex
	mu       sync.Mutex // guards what follows; never held across a submission
	changed  *sync.Cond // inflight or held changed
	seq      uint64     // the connection's last write number (fsm.Numbered)
	sent     uint64     // how many writes the connection sent, numbered or not
	open     int        // writes taken and not answered yet, held ones too
	openSize int        // their bodies' bytes
	inflight int        // writes sent whose result has not come
	held     []*write   // held back, by write number, waiting to be sent again
	resender bool       // a goroutine sends the held writes again
}

// write is one client write on its way.
type write struct {
	req      fsm.Request
	n        uint64       // its place among the connection's writes (a sync has no Seq)
	rec      proto.Record // decoded, for the lock check; nil if it did not decode
	early    bool         // may be answered with the leader's result
	deadline time.Time    // in delay mode, the end of its wait for locks
	done     func(fsm.Result)
}

func newWrites(c *conn) *writes {
	w := &writes{c: c}
	w.changed = sync.NewCond(&w.mu)
	return w
}

// The bounds of a connection's open writes (taken from the client, not
// answered yet). A write over them waits, and with it the connection's
// reader, so a client that pipelines writes faster than the shard commits
// them holds no more than this on the member and in the leader's queue,
// instead of up to a full proposal queue of 1 MiB requests; the rest of its
// burst waits in its socket. ZooKeeper's globalOutstandingLimit is the same
// idea across connections. A single write larger than maxOpenBytes goes
// alone.
const (
	maxOpenWrites = 1000
	maxOpenBytes  = 4 << 20
)

// send numbers a write (fsm.Numbered) and submits it, or, while earlier writes of the
// connection are held back, queues it behind them. It first waits while
// the connection's open writes are at their bounds; it waits before it
// takes sending, which the resender of held writes needs.
func (w *writes) send(wr *write) {
	w.mu.Lock()
	size := len(wr.req.Body)
	for w.open > 0 && (w.open >= maxOpenWrites || w.openSize+size > maxOpenBytes) {
		w.changed.Wait()
	}
	w.open++
	w.openSize += size
	w.mu.Unlock()
	w.sending.Lock()
	defer w.sending.Unlock()
	w.mu.Lock()
	w.sent++
	wr.n, wr.req.Conn = w.sent, w.c.id
	if fsm.Numbered(wr.req.Op) {
		w.seq++
		wr.req.Seq = w.seq
	}
	wr.req.Wait = w.c.lockWait() > 0
	if len(w.held) > 0 {
		w.held = append(w.held, wr)
		w.mu.Unlock()
		return
	}
	w.inflight++
	w.mu.Unlock()
	w.submit(wr)
}

// submit proposes a write counted in inflight; the caller holds sending.
func (w *writes) submit(wr *write) {
	submit := w.c.s.replica.Submit
	if wr.early {
		submit = w.c.s.replica.SubmitEarly
	}
	submit(wr.req, func(res fsm.Result) { w.result(wr, res) })
}

// result takes a write's result: a hold queues it to be sent again; any
// other result is the answer.
func (w *writes) result(wr *write, res fsm.Result) {
	w.mu.Lock()
	w.inflight--
	w.changed.Broadcast()
	if res.Err == fsm.ErrDelayed {
		// Results may come out of log order (an early reply from the
		// leader, another from this member's own apply): keep the held
		// writes in the order the connection sent them.
		i, _ := slices.BinarySearchFunc(w.held, wr.n, func(h *write, n uint64) int { return cmp.Compare(h.n, n) })
		w.held = slices.Insert(w.held, i, wr)
		if !w.resender {
			w.resender = true
			go w.resend()
		}
		w.mu.Unlock()
		return
	}
	w.closeLocked(wr)
	w.mu.Unlock()
	wr.done(res)
}

// closeLocked counts a write as answered; the caller holds mu.
func (w *writes) closeLocked(wr *write) {
	w.open--
	w.openSize -= len(wr.req.Body)
	w.changed.Broadcast()
}

// resend sends the held writes again until none is left. It first lets
// every write in flight come back, so that all the held ones are queued
// in their order; then it waits until the first is no longer locked (or
// its wait is over: it is sent without Wait and meets ErrLocked), and
// sends them all in order.
func (w *writes) resend() {
	for {
		w.mu.Lock()
		for w.inflight > 0 {
			w.changed.Wait()
		}
		if len(w.held) == 0 {
			w.resender = false
			w.mu.Unlock()
			return
		}
		head := w.held[0]
		w.mu.Unlock()
		w.c.awaitUnlocked(head.req.Op, head.rec, head.deadline)
		if !w.resendHeld() {
			return
		}
	}
}

// resendHeld sends every held write again, in order, unless a write is in
// flight again (resend then waits once more). It returns false when the
// connection is gone: the held writes end unanswered with it.
func (w *writes) resendHeld() bool {
	w.sending.Lock()
	defer w.sending.Unlock()
	w.mu.Lock()
	select {
	case <-w.c.closing:
		held := w.held
		w.held, w.resender = nil, false
		for _, wr := range held {
			w.closeLocked(wr)
		}
		w.mu.Unlock()
		for _, wr := range held {
			wr.done(fsm.Result{Err: proto.ErrConnectionLoss})
		}
		return false
	default:
	}
	if w.inflight > 0 {
		w.mu.Unlock()
		return true
	}
	held := w.held
	w.held = nil
	w.inflight += len(held)
	w.mu.Unlock()
	held[0].req.Wait = time.Now().Before(held[0].deadline)
	for _, wr := range held {
		w.submit(wr)
	}
	return true
}

package replica

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"time"
)

// errLogStalled fails the appends of a leader whose log write is stalled.
var errLogStalled = errors.New("replica: the log write has not returned for longer than keeper.log_stall_timeout: not replicating")

// stallWatch knows whether the member's Raft log write under way has been
// unanswered for longer than limit: a disk that stopped answering.
//
// hashicorp/raft's leader writes each new entry to its log from its main
// loop, and sends heartbeats from other goroutines (its issues #503 and
// #666). A leader whose disk hangs therefore stops committing but goes on
// telling its followers that it leads, and the shard takes no write until
// the disk answers, on a node every shard the node leads. While the watch
// reports a stall, the quiet transport fails every append the member would
// send, heartbeats included: its followers hear nothing, elect one of
// themselves and go on with the entries they have. When the write returns
// the old leader learns of the new term and follows. Raft writes the log
// from its main loop only (appends as leader, entries received as
// follower), so one write is under way at a time.
type stallWatch struct {
	limit  time.Duration // 0: never stalled
	log    *slog.Logger
	since  atomic.Int64 // when the write under way began (Unix ns); 0: none
	warned atomic.Bool  // this write's stall was logged
}

// begin records that a log write starts at now.
func (w *stallWatch) begin(now time.Time) {
	if w != nil {
		w.since.Store(now.UnixNano())
	}
}

// end records that the write under way returned.
func (w *stallWatch) end() {
	if w == nil {
		return
	}
	w.since.Store(0)
	if w.warned.CompareAndSwap(true, false) {
		w.log.Warn("the Raft log write returned after a stall; replicating again")
	}
}

// stalled reports whether the write under way began more than limit ago.
func (w *stallWatch) stalled() bool {
	if w == nil || w.limit <= 0 {
		return false
	}
	since := w.since.Load()
	if since == 0 || time.Since(time.Unix(0, since)) <= w.limit {
		return false
	}
	if w.warned.CompareAndSwap(false, true) {
		w.log.Error("the Raft log write has not returned: not replicating, so that the followers elect another leader",
			"for", time.Since(time.Unix(0, since)).Round(time.Millisecond), "log_stall_timeout", w.limit)
	}
	return true
}

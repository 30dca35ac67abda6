package testenv

import (
	"sync"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/replica"
)

// StallState keeps r's state machine from applying anything: it holds the
// state for reading until the returned function is called (once or more),
// so the next entry's apply waits for the lock while raft goes on handing
// entries to it (raft's applied index moves, Replica.StateApplied does
// not). Configuration entries pass it by. Reads of the state wait too.
func StallState(r *replica.Replica) (resume func()) {
	taken, resumed := make(chan struct{}), make(chan struct{})
	go r.View(func(*fsm.State) {
		close(taken)
		<-resumed
	})
	<-taken
	return sync.OnceFunc(func() { close(resumed) })
}

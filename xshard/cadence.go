package xshard

import (
	"sync"
	"time"
)

// cleanupCadence is how long a finished transaction's cleanup waits for
// others: cleanups released together reach each shard's leader at once,
// and its group commit packs their deletes into one log entry. Records
// only linger that much longer; their locks are gone with the decision.
const cleanupCadence = 20 * time.Millisecond

// cadence releases its waiters together, once per period after the first
// of them arrives; it costs nothing while nobody waits.
type cadence struct {
	period time.Duration
	mu     sync.Mutex
	next   chan struct{} // closed when the waiting group is released; nil when none waits
}

// wait blocks until the group it joins is released or done closes.
func (c *cadence) wait(done <-chan struct{}) {
	c.mu.Lock()
	if c.next == nil {
		ch := make(chan struct{})
		c.next = ch
		time.AfterFunc(c.period, func() {
			c.mu.Lock()
			c.next = nil
			c.mu.Unlock()
			close(ch)
		})
	}
	ch := c.next
	c.mu.Unlock()
	select {
	case <-ch:
	case <-done:
	}
}

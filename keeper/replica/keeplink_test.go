package replica

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestKeptLinkLastsWhileOutcomesComeBack: a leader keeps its link to the
// old leader for what waits on it while outcomes keep coming back on it
// (CI once saw a busy but live relay cut an election timeout after the
// first wait, and writes answered connection loss that applied), drops it
// once nothing came back for an election timeout (a paused or cut-off old
// leader), and drops it after keptAtMost election timeouts however busy
// it stays (its own clients' writes go over it meanwhile, so under steady
// load it would never empty: an independent review found that).
func TestKeptLinkLastsWhileOutcomesComeBack(t *testing.T) {
	const election = time.Second
	kept := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return kept.Add(d) }
	heard := func(d time.Duration) int64 { return kept.Add(d).UnixNano() }

	assert.True(t, keepLink(kept, 0, at(900*time.Millisecond), election), "within an election timeout of the first wait")
	assert.False(t, keepLink(kept, 0, at(1100*time.Millisecond), election), "nothing came back")
	assert.True(t, keepLink(kept, heard(3*time.Second), at(3500*time.Millisecond), election), "an outcome came back half a timeout ago")
	assert.False(t, keepLink(kept, heard(3*time.Second), at(4100*time.Millisecond), election), "the last outcome came back a timeout ago")
	assert.False(t, keepLink(kept, heard(9999*time.Millisecond), at(10*time.Second), election), "keptAtMost timeouts, however busy")
	assert.False(t, keepLink(kept, heard(-time.Hour), at(1100*time.Millisecond), election), "an outcome of an older link counts for nothing")
}

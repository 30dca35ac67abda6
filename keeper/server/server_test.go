package server

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestConnectionIDsGrow: connection ids grow, from the clock, and past a
// floor ahead of it (a session's last connection, given by this member
// before its clock went back), and every later one stays above.
func TestConnectionIDsGrow(t *testing.T) {
	var s Server
	first := s.nextConnID()
	assert.GreaterOrEqual(t, first, uint64(time.Now().Add(-time.Minute).UnixNano()))
	ahead := uint64(time.Now().Add(time.Hour).UnixNano())
	id := s.connIDAbove(ahead)
	assert.Greater(t, id, ahead)
	assert.Greater(t, s.nextConnID(), id)
}

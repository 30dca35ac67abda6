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

// TestConnectionCapCountsAnIPv6SlashSixtyFour: the per-IP cap counts an
// IPv6 client by its /64 (one host has them all), an IPv4 one by its
// address.
func TestConnectionCapCountsAnIPv6SlashSixtyFour(t *testing.T) {
	assert.Equal(t, capKey("2001:db8:1:2::1"), capKey("2001:db8:1:2:ffff::9"))
	assert.NotEqual(t, capKey("2001:db8:1:2::1"), capKey("2001:db8:1:3::1"))
	assert.Equal(t, "192.0.2.1", capKey("192.0.2.1"))
	assert.NotEqual(t, capKey("192.0.2.1"), capKey("192.0.2.2"))
	assert.Equal(t, "::ffff:192.0.2.1", capKey("::ffff:192.0.2.1"), "an IPv4-mapped address counts as its IPv4 one would")
}

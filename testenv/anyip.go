package testenv

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"
)

// LoopbackIPv6Prefix routes a random /64 of unique local addresses to the
// loopback device as local (Linux's AnyIP), so that this process may
// listen on and connect from any address in it, as one host holding a
// whole /64 may; the route goes when the test ends. It returns the
// prefix's first four groups ("fd37:…:…:…"). It needs root and iproute2:
// without them the test skips, or fails with XKEEPER_REQUIRE_NETNS=1.
func LoopbackIPv6Prefix(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "XKEEPER_REQUIRE_NETNS", "a local IPv6 /64 needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		skipOrFail(t, "XKEEPER_REQUIRE_NETNS", "a local IPv6 /64 needs iproute2 (apt-get install iproute2): %v", err)
	}
	prefix := fmt.Sprintf("fd37:%04x:%04x:%04x", rand.IntN(1<<16), rand.IntN(1<<16), rand.IntN(1<<16))
	route := []string{"-6", "route", "add", "local", prefix + "::/64", "dev", "lo"}
	if out, err := exec.Command("ip", route...).CombinedOutput(); err != nil {
		skipOrFail(t, "XKEEPER_REQUIRE_NETNS", "ip %v: %v: %s", route, err, out)
	}
	t.Cleanup(func() {
		route[2] = "del"
		if out, err := exec.Command("ip", route...).CombinedOutput(); err != nil {
			t.Logf("ip %v: %v: %s", route, err, out)
		}
	})
	return prefix
}

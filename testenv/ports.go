package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Ports are handed out from below the kernel's ephemeral range, so that an
// outgoing connection's source port cannot take a port between the check and
// the server's bind, or while a server is down for a restart.
const (
	portRangeLow  = 10000
	portRangeHigh = 32767 // used when the ephemeral range cannot be read
)

// FreePort returns a TCP port on 127.0.0.1 that is free now and reserved for
// this process until the test ends.
func FreePort(t testing.TB) int {
	t.Helper()
	return FreePorts(t, 1)[0]
}

// FreePorts returns n distinct TCP ports on 127.0.0.1 that are free now.
// Each is reserved until the test ends with a locked file in the temp dir, so
// that concurrent test processes using this package do not get the same port.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	lockDir := filepath.Join(os.TempDir(), "xkeeper-testenv-ports")
	if err := os.MkdirAll(lockDir, 0o777); err != nil {
		t.Fatalf("FreePorts: %v", err)
	}
	high := ephemeralLow() - 1
	span := high - portRangeLow + 1
	ports := make([]int, 0, n)
	start := rand.IntN(span)
	for i := 0; i < span && len(ports) < n; i++ {
		port := portRangeLow + (start+i)%span
		lock, ok := reservePort(lockDir, port)
		if !ok {
			continue
		}
		t.Cleanup(func() {
			// Unlink while locked, so that a waiter holding the old inode
			// sees the mismatch in reservePort and moves on.
			os.Remove(lock.Name())
			lock.Close()
		})
		ports = append(ports, port)
	}
	if len(ports) < n {
		t.Fatalf("FreePorts: found only %d of %d free ports in %d-%d", len(ports), n, portRangeLow, high)
	}
	return ports
}

// reservePort takes the lock file for port without blocking and checks that
// the port can be bound on 127.0.0.1. The returned file holds the lock.
func reservePort(lockDir string, port int) (*os.File, bool) {
	f, err := os.OpenFile(filepath.Join(lockDir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, false
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil || !samePath(f) {
		f.Close()
		return nil, false
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		f.Close()
		return nil, false
	}
	l.Close()
	return f, true
}

// samePath reports whether f is still the file at its path, that is, it was
// not unlinked by a previous holder between our open and flock.
func samePath(f *os.File) bool {
	open, err1 := f.Stat()
	named, err2 := os.Stat(f.Name())
	return err1 == nil && err2 == nil && os.SameFile(open, named)
}

// ephemeralLow returns the lowest port of the kernel's ephemeral range.
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return portRangeHigh + 1
	}
	var low, high int
	if _, err := fmt.Sscan(string(data), &low, &high); err != nil || low <= portRangeLow+1000 {
		return portRangeHigh + 1
	}
	return low
}

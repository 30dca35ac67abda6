package testenv

import (
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestDelayHoldsBackWhatANodeSends: over one connection from node a to
// node b, round trips are quick; with what a sends to b held back they take
// at least the delay, with b's answers held back too at least twice it;
// isolating a keeps what its delay line forwards from reaching b; once
// healed round trips are quick again, on the same connection throughout.
func TestDelayHoldsBackWhatANodeSends(t *testing.T) {
	n := StartNet(t, "a", "b")
	const delay = 60 * time.Millisecond
	var l net.Listener
	require.NoError(t, inNamespace(n.end("b").ns, func() (err error) {
		l, err = net.Listen("tcp", n.Addr("b", 7000))
		return err
	}))
	defer l.Close()
	got := make(chan int, 100) // what b receives, as it receives it
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			select {
			case got <- n:
			default:
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	var c net.Conn
	require.NoError(t, inNamespace(n.end("a").ns, func() (err error) {
		c, err = net.DialTimeout("tcp", n.Addr("b", 7000), 5*time.Second)
		return err
	}))
	defer c.Close()
	// fastest is the quickest of a few round trips: a delay holds back
	// every packet, so it bounds even the quickest from below.
	fastest := func() time.Duration {
		best := time.Hour
		msg := make([]byte, 64)
		for range 5 {
			began := time.Now()
			_, err := c.Write(msg)
			require.NoError(t, err)
			_, err = io.ReadFull(c, msg)
			require.NoError(t, err)
			best = min(best, time.Since(began))
		}
		return best
	}
	require.Less(t, fastest(), delay, "round trip before any delay")
	n.Delay("a", "b", delay)
	require.GreaterOrEqual(t, fastest(), delay, "round trip with a→b held back")
	n.Delay("b", "a", delay)
	require.GreaterOrEqual(t, fastest(), 2*delay, "round trip with both ways held back")

	for len(got) > 0 {
		<-got
	}
	n.Isolate("a", true)
	msg := make([]byte, 64)
	_, err := c.Write(msg)
	require.NoError(t, err)
	select {
	case <-got:
		t.Fatal("b received what isolated a sent through its delay line")
	case <-time.After(10 * delay):
	}
	n.Heal()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
	_, err = io.ReadFull(c, msg) // TCP sends it again
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Time{}))
	require.Less(t, fastest(), delay, "round trip once healed")
}

// TestNamespaceThreadOutlivesItsWork: a process forked by a thread that
// then enters a node's namespace (as the delay line does) outlives the
// goroutine that forked it. The thread comes back from the namespace and
// is kept; before, it was discarded, and Pdeathsig killed whatever it had
// forked: now and then a node process of TestNodesUnderNetworkFaults, as
// the delays began.
func TestNamespaceThreadOutlivesItsWork(t *testing.T) {
	n := StartNet(t, "a")
	type started struct {
		p               *Process
		err             error
		forked, entered int // the threads that forked and that entered
	}
	done := make(chan started, 1)
	go func() {
		runtime.LockOSThread() // fork on this thread, then enter on it
		defer runtime.UnlockOSThread()
		s := started{forked: unix.Gettid()}
		s.p, s.err = startProcess(exec.Command("sleep", "60"), filepath.Join(t.TempDir(), "sleep.log"))
		if s.err == nil {
			s.err = inNamespace(n.end("a").ns, func() error { s.entered = unix.Gettid(); return nil })
		}
		done <- s
	}()
	s := <-done
	require.NoError(t, s.err)
	t.Cleanup(s.p.Kill)
	require.Equal(t, s.forked, s.entered, "the namespace is entered on the caller's thread, which may have forked")
	require.Never(t, func() bool {
		select {
		case <-s.p.Done():
			return true
		default:
			return false
		}
	}, time.Second, 10*time.Millisecond, "the process died with the thread that forked it")
}

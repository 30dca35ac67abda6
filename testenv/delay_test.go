package testenv

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

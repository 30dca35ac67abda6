package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// delayLine holds back what one node sends to chosen other nodes, as tc
// netem's delay would (this kernel has no netem): in the node's namespace
// the routes to those nodes lead into a tun device whose packets this
// process reads, keeps for the delay, and writes back; the namespace then
// forwards them over its link (a policy rule routes what comes out of the
// tun by the link's table). Existing connections are held back at once,
// with nothing reset, and each destination's packets keep their order.
type delayLine struct {
	net  *Net
	end  netEnd
	file *os.File

	stop    chan struct{}  // closed by close: writers drop what they hold
	writers sync.WaitGroup // one per destination

	mu     sync.Mutex
	closed bool
	delays map[[4]byte]time.Duration // by destination address
	queues map[[4]byte]chan heldPacket
}

type heldPacket struct {
	data []byte
	due  time.Time
}

// heldPackets bounds each destination's queue; past it packets are dropped,
// as a full netem queue drops them.
const heldPackets = 4096

// delayTable is the routing table of what leaves the tun: the link's.
const delayTable = "100"

// newDelayLine makes node's tun device and routing, and starts reading.
func newDelayLine(n *Net, node string) *delayLine {
	e := n.end(node)
	d := &delayLine{net: n, end: e, stop: make(chan struct{}),
		delays: map[[4]byte]time.Duration{}, queues: map[[4]byte]chan heldPacket{}}
	in := func(args ...string) { n.runIn(e, args...) }
	// Once policy rules exist the local table is searched first, whole, and
	// its 127.0.0.0/8 would take the other nodes' addresses: only the
	// node's own addresses (and 127.0.0.1) stay local.
	in("ip", "route", "del", "local", "127.0.0.0/8", "dev", "lo", "table", "local")
	in("ip", "tuntap", "add", "dev", e.tun, "mode", "tun")
	// Strict reverse-path filtering on the link would drop what the delayed
	// node sends back, its route now leading into the tun.
	for _, kv := range []string{"net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf." + e.tun + ".rp_filter=0",
		"net.ipv4.conf." + e.inner + ".rp_filter=0",
		"net.ipv4.conf." + e.tun + ".route_localnet=1", "net.ipv4.conf." + e.tun + ".accept_local=1"} {
		in("sysctl", "-qw", kv)
	}
	in("ip", "link", "set", e.tun, "up")
	in("ip", "route", "add", n.subnet+".0/24", "dev", e.inner, "table", delayTable)
	in("ip", "rule", "add", "iif", e.tun, "lookup", delayTable)
	f, err := openTun(e.ns, e.tun)
	if err != nil {
		n.t.Fatalf("testenv: delays of %s: %v", node, err)
	}
	d.file = f
	go d.read()
	return d
}

// openTun attaches to the tun device name of namespace ns.
func openTun(ns, name string) (f *os.File, err error) {
	err = inNamespace(ns, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		ifr, err := unix.NewIfreq(name)
		if err == nil {
			ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
			err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
		}
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("attach to %s: %w", name, err)
		}
		f = os.NewFile(uintptr(fd), "/dev/net/tun")
		return nil
	})
	return f, err
}

// inNamespace runs fn on the calling goroutine's thread, moved into
// network namespace ns (ip netns's name) for fn: sockets and devices fn
// opens are the namespace's. The thread then returns to its namespace and
// is unlocked. It must not end: a process started with Pdeathsig (every
// StartProcess) is killed when the thread that forked it exits, and any
// thread may have forked one; if it cannot return, it stays locked, and
// the goroutine must not end either, so inNamespace panics.
func inNamespace(ns string, fn func() error) error {
	runtime.LockOSThread()
	home, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer home.Close()
	nsf, err := os.Open(filepath.Join("/var/run/netns", ns))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer nsf.Close()
	if err := unix.Setns(int(nsf.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", ns, err)
	}
	defer func() { // also when fn panics or ends the goroutine (t.FailNow)
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			panic(fmt.Sprintf("testenv: a thread cannot leave namespace %s: %v", ns, err))
		}
		runtime.UnlockOSThread()
	}()
	return fn()
}

// set holds back what goes to addr (a node's address) by delay, or lets it
// go straight again (0). Packets already held still wait their time.
func (d *delayLine) set(addr string, delay time.Duration) {
	ip := net.ParseIP(addr).To4()
	if ip == nil {
		d.net.t.Fatalf("testenv: delay to %q: not an IPv4 address", addr)
	}
	dst := [4]byte(ip)
	d.mu.Lock()
	_, was := d.delays[dst]
	if delay > 0 {
		d.delays[dst] = delay
	} else {
		delete(d.delays, dst)
	}
	d.mu.Unlock()
	switch {
	case delay > 0:
		d.net.runIn(d.end, "ip", "route", "replace", addr+"/32", "dev", d.end.tun, "src", d.end.addr)
	case was:
		d.net.runIn(d.end, "ip", "route", "del", addr+"/32", "dev", d.end.tun)
	}
}

// read takes every packet the routes hand the tun and queues it for its
// destination, until the device or the file closes.
func (d *delayLine) read() {
	buf := make([]byte, 1<<16)
	for {
		n, err := d.file.Read(buf)
		if err != nil { // closed, or the device went with its namespace
			return
		}
		if n < 20 || buf[0]>>4 != 4 {
			continue // not IPv4: nothing of ours
		}
		d.hold([4]byte(buf[16:20]), append([]byte(nil), buf[:n]...))
	}
}

// hold queues a packet for dst, due after dst's delay.
func (d *delayLine) hold(dst [4]byte, data []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	q := d.queues[dst]
	if q == nil {
		q = make(chan heldPacket, heldPackets)
		d.queues[dst] = q
		d.writers.Add(1)
		go d.write(q)
	}
	select {
	case q <- heldPacket{data, time.Now().Add(d.delays[dst])}:
	default: // full: lost
	}
}

// write sends one destination's packets on, each at its time, in order,
// until the line closes. A packet the device refuses is lost, as on a
// wire.
func (d *delayLine) write(q <-chan heldPacket) {
	defer d.writers.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for p := range q {
		timer.Reset(time.Until(p.due))
		select {
		case <-timer.C:
		case <-d.stop:
			return
		}
		if _, err := d.file.Write(p.data); errors.Is(err, os.ErrClosed) {
			return
		}
	}
}

// close stops the line, dropping what it holds, and waits for its
// goroutines; the namespace's removal takes the device.
func (d *delayLine) close() {
	close(d.stop)
	d.file.Close()
	d.mu.Lock()
	d.closed = true
	for dst, q := range d.queues {
		close(q)
		delete(d.queues, dst)
	}
	d.mu.Unlock()
	d.writers.Wait()
}

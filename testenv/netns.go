package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Net is a network of one namespace per node (ip netns), each joined by a
// veth pair to a bridge in this process's namespace, so that the nodes
// reach each other, and the test reaches them, only over links whose
// packets a filter in the node's namespace (nftables) can drop: all of
// them, those of one other node, or a share; and what a node sends to
// another can be held back (Delay). Addresses stay in the loopback range,
// 127.77.X.0/24 (route_localnet on the links), so no traffic can leave the
// machine. It needs root and iproute2: without them tests skip, or fail
// with XKEEPER_REQUIRE_NETNS=1 (CI sets it), iproute2 and nftables.
type Net struct {
	t      testing.TB
	bridge string
	subnet string                // "127.77.X"
	nodes  map[string]netEnd     // by node name
	delays map[string]*delayLine // by the node whose packets it holds back, once asked
}

// netEnd is a node's namespace, its address, the two ends of its link,
// and the name of its delay line's tun device.
type netEnd struct {
	ns, inner, outer, addr, tun string
}

// netLock serialises the choice of subnets between test processes.
const netLock = "/tmp/xkeeper-netns.lock"

// StartNet makes a namespace for each of nodes; they go when the test ends.
func StartNet(t testing.TB, nodes ...string) *Net {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "XKEEPER_REQUIRE_NETNS", "network namespaces need root")
	}
	for _, cmd := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(cmd); err != nil {
			skipOrFail(t, "XKEEPER_REQUIRE_NETNS", "network faults need iproute2 and nftables (apt-get install iproute2 nftables): %v", err)
		}
	}
	lock, err := os.OpenFile(netLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	n := &Net{t: t, nodes: map[string]netEnd{}, delays: map[string]*delayLine{}}
	t.Cleanup(n.remove)
	x, err := freeSubnet()
	if err != nil {
		t.Fatal(err)
	}
	n.subnet = fmt.Sprintf("127.77.%d", x)
	tag := fmt.Sprintf("xk%d", x)
	n.bridge = tag + "br"
	n.run("ip", "link", "add", n.bridge, "type", "bridge")
	n.run("sysctl", "-qw", "net.ipv4.conf."+n.bridge+".route_localnet=1")
	n.run("ip", "addr", "add", n.subnet+".254/24", "dev", n.bridge)
	n.run("ip", "link", "set", n.bridge, "up")
	for i, name := range nodes {
		e := netEnd{ns: fmt.Sprintf("%s-%s", tag, name), inner: fmt.Sprintf("%si%d", tag, i+1), outer: fmt.Sprintf("%so%d", tag, i+1),
			addr: fmt.Sprintf("%s.%d", n.subnet, i+1), tun: fmt.Sprintf("%sd%d", tag, i+1)}
		n.nodes[name] = e
		n.run("ip", "netns", "add", e.ns)
		n.run("ip", "link", "add", e.outer, "type", "veth", "peer", "name", e.inner)
		n.run("ip", "link", "set", e.inner, "netns", e.ns)
		n.run("ip", "link", "set", e.outer, "master", n.bridge, "up")
		n.runIn(e, "sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1")
		n.runIn(e, "sysctl", "-qw", "net.ipv4.conf."+e.inner+".route_localnet=1")
		n.runIn(e, "ip", "link", "set", "lo", "up")
		n.runIn(e, "ip", "addr", "add", e.addr+"/24", "dev", e.inner)
		n.runIn(e, "ip", "link", "set", e.inner, "up")
	}
	return n
}

// freeSubnet returns an X that no address (127.77.X.254, a bridge's) and
// no link (xkX…, a namespace's not yet gone) on the machine uses.
func freeSubnet() (int, error) {
	addrs, err := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		return 0, fmt.Errorf("testenv: ip addr show: %w", err)
	}
	links, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return 0, fmt.Errorf("testenv: ip link show: %w", err)
	}
	for x := 1; x < 255; x++ {
		if !strings.Contains(string(addrs), fmt.Sprintf(" 127.77.%d.254/", x)) && !strings.Contains(string(links), fmt.Sprintf(" xk%do", x)) &&
			!strings.Contains(string(links), fmt.Sprintf(" xk%dbr", x)) {
			return x, nil
		}
	}
	return 0, fmt.Errorf("testenv: every 127.77.X subnet is in use")
}

// Addr returns a node's address, host:port.
func (n *Net) Addr(node string, port int) string {
	return net.JoinHostPort(n.end(node).addr, fmt.Sprint(port))
}

// Command returns cmd to run inside a node's namespace.
func (n *Net) Command(node string, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.end(node).ns, name}, args...)...)
}

// Isolate drops every packet to and from a node (on), or lets them
// through again (off).
func (n *Net) Isolate(node string, on bool) {
	e := n.end(node)
	if on {
		n.filter(node, fmt.Sprintf(`iifname %q drop`, e.inner), fmt.Sprintf(`oifname %q drop`, e.inner))
	} else {
		n.filter(node, "", "")
	}
}

// Partition drops every packet between nodes a and b, both ways; each
// still reaches the others and the test.
func (n *Net) Partition(a, b string) {
	n.filter(a, "ip saddr "+n.end(b).addr+" drop", "ip daddr "+n.end(b).addr+" drop")
	n.filter(b, "ip saddr "+n.end(a).addr+" drop", "ip daddr "+n.end(a).addr+" drop")
}

// Lossy drops each packet to or from a node with probability percent/100.
func (n *Net) Lossy(node string, percent int) {
	e := n.end(node)
	n.filter(node, fmt.Sprintf(`iifname %q numgen random mod 100 < %d drop`, e.inner, percent),
		fmt.Sprintf(`oifname %q numgen random mod 100 < %d drop`, e.inner, percent))
}

// DropOneWay drops each packet node from sends to node to with probability
// percent/100 (100: all of them), and none the other way: to still reaches
// from, so from hears a leader on to whose answers are lost, and TCP
// connections between the two stall rather than break.
func (n *Net) DropOneWay(from, to string, percent int) {
	rule := "ip daddr " + n.end(to).addr
	if percent < 100 {
		rule += fmt.Sprintf(" numgen random mod 100 < %d", percent)
	}
	n.filter(from, "", rule+" drop")
}

// Delay holds back every packet node from sends to node to by d, one way
// (for both ways, ask for each), or lets them go straight again (d 0).
// Connections stay open; what was held when the delay is lifted still
// arrives late.
func (n *Net) Delay(from, to string, d time.Duration) {
	line := n.delays[from]
	if line == nil {
		if d == 0 {
			return
		}
		line = newDelayLine(n, from)
		n.delays[from] = line
	}
	line.set(n.end(to).addr, d)
}

// Heal takes away every filter and every delay of every node; packets
// already held back still arrive late.
func (n *Net) Heal() {
	for node := range n.nodes {
		n.filter(node, "", "")
		for to := range n.nodes {
			if to != node {
				n.Delay(node, to, 0)
			}
		}
	}
}

// filter replaces a node's packet filter (nftables, in its namespace) with
// an input and an output rule, either of them "" for none; with neither,
// everything passes. This kernel has no netem queueing discipline, so
// delays are not a filter's but a delay line's (Delay).
func (n *Net) filter(node string, in, out string) {
	e := n.end(node)
	nft := func(args ...string) { n.runIn(e, append([]string{"nft"}, args...)...) }
	nft("add", "table", "inet", "xk") // no error if it exists
	nft("flush", "table", "inet", "xk")
	// Outgoing rules hook postrouting, not output, so that they see what a
	// delay line forwards as well as what the node sends straight.
	for _, c := range []struct{ chain, hook, rule string }{{"in", "input", in}, {"out", "postrouting", out}} {
		if c.rule == "" {
			continue
		}
		nft("add", "chain", "inet", "xk", c.chain, "{ type filter hook "+c.hook+" priority 0; }")
		nft(append([]string{"add", "rule", "inet", "xk", c.chain}, strings.Fields(c.rule)...)...)
	}
}

func (n *Net) end(node string) netEnd {
	e, ok := n.nodes[node]
	if !ok {
		n.t.Fatalf("testenv: no node %s in the network", node)
	}
	return e
}

// run runs a command that must succeed.
func (n *Net) run(args ...string) {
	n.t.Helper()
	runCmd(n.t, args...)
}

// runCmd runs a command that must succeed.
func runCmd(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("testenv: %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// runIn runs a command that must succeed in a node's namespace.
func (n *Net) runIn(e netEnd, args ...string) {
	n.t.Helper()
	n.run(append([]string{"ip", "netns", "exec", e.ns}, args...)...)
}

// remove deletes the links, the namespaces and the bridge. A link's
// outer end is deleted explicitly: a namespace lingers after its name is
// gone while the kernel still holds references to it, and its link with it.
func (n *Net) remove() {
	for _, d := range n.delays {
		d.close()
	}
	for _, e := range n.nodes {
		exec.Command("ip", "link", "del", e.outer).Run()
		exec.Command("ip", "netns", "del", e.ns).Run()
	}
	if n.bridge != "" {
		exec.Command("ip", "link", "del", n.bridge).Run()
	}
}

package config

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
)

// Layout describes shards × members on one host: shards are named a, b,
// c…, members a1, a2…, each with a client and a Raft port taken in order
// from ports (2 per member) and a data directory under dir, and a fresh
// cluster secret.
func Layout(dir string, shards, members int, ports []int, k Keeper) (*Cluster, error) {
	if len(ports) < 2*shards*members {
		return nil, fmt.Errorf("config: %d ports for %d members", len(ports), shards*members)
	}
	c, err := layout(shards, members, k, func(id string, _ int) Member {
		m := Member{ID: id, ClientAddr: loopback(ports[0]), RaftAddr: loopback(ports[1]), DataDir: filepath.Join(dir, id)}
		ports = ports[2:]
		return m
	})
	if err != nil {
		return nil, err
	}
	return c, c.Validate()
}

// LayoutNodes describes shards placed on nodes on one host: nodes n1, n2…
// each with a peer port and a client endpoint (the first ports, two per
// node) and a data directory under dir, and shards a, b, c… with one
// member on every node (a1 on n1, a2 on n2…), each with a client port
// taken in order from the rest of ports. Shard a is the root shard; no
// path is mounted.
func LayoutNodes(dir string, shards, nodes int, ports []int, k Keeper) (*Cluster, error) {
	if len(ports) < NodePorts(shards, nodes) {
		return nil, fmt.Errorf("config: %d ports for %d nodes and %d members", len(ports), nodes, shards*nodes)
	}
	var ns []Node
	for i := 1; i <= nodes; i++ {
		name := fmt.Sprintf("n%d", i)
		ns = append(ns, Node{Name: name, PeerAddr: loopback(ports[0]), ClientAddr: loopback(ports[1]), DataDir: filepath.Join(dir, name)})
		ports = ports[2:]
	}
	c, err := layout(shards, nodes, k, func(id string, i int) Member {
		m := Member{ID: id, Node: ns[i].Name, ClientAddr: loopback(ports[0])}
		ports = ports[1:]
		return m
	})
	if err != nil {
		return nil, err
	}
	c.Nodes = ns
	c.PlaceOnNodes()
	return c, c.Validate()
}

// NodePorts is how many ports LayoutNodes takes.
func NodePorts(shards, nodes int) int { return 2*nodes + shards*nodes }

// layout names shards a, b, c… of members each, their members a1, a2…,
// made by member(id, index in the shard).
func layout(shards, members int, k Keeper, member func(id string, i int) Member) (*Cluster, error) {
	if shards < 1 || members < 1 {
		return nil, fmt.Errorf("config: need at least one shard and one member, got %d × %d", shards, members)
	}
	if shards > 26 {
		return nil, fmt.Errorf("config: at most 26 shards, got %d", shards)
	}
	c := &Cluster{Keeper: k, Security: Security{ClusterSecret: NewClusterSecret()}}
	for s := 0; s < shards; s++ {
		sh := Shard{Name: string(rune('a' + s))}
		for m := 1; m <= members; m++ {
			sh.Members = append(sh.Members, member(fmt.Sprintf("%s%d", sh.Name, m), m-1))
		}
		c.Shards = append(c.Shards, sh)
	}
	return c, nil
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// FreeLoopbackPorts asks the kernel for n distinct free ports on 127.0.0.1.
func FreeLoopbackPorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("config: find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

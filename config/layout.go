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
	if shards < 1 || members < 1 {
		return nil, fmt.Errorf("config: need at least one shard and one member, got %d × %d", shards, members)
	}
	if shards > 26 {
		return nil, fmt.Errorf("config: at most 26 shards, got %d", shards)
	}
	if len(ports) < 2*shards*members {
		return nil, fmt.Errorf("config: %d ports for %d members", len(ports), shards*members)
	}
	c := &Cluster{Keeper: k, Security: Security{ClusterSecret: NewClusterSecret()}}
	for s := 0; s < shards; s++ {
		sh := Shard{Name: string(rune('a' + s))}
		for m := 1; m <= members; m++ {
			id := fmt.Sprintf("%s%d", sh.Name, m)
			sh.Members = append(sh.Members, Member{
				ID:         id,
				ClientAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
				RaftAddr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
				DataDir:    filepath.Join(dir, id),
			})
			ports = ports[2:]
		}
		c.Shards = append(c.Shards, sh)
	}
	return c, c.Validate()
}

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

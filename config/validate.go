package config

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Validate reports every problem of the cluster file, one per line of the
// error, each naming its key, as in `config: shards[1].members[0].raft_addr:
// required`. It returns nil for a usable file.
func (c *Cluster) Validate() error {
	var p problems
	addrs := map[string]string{}
	nodes := c.validateNodes(&p, addrs)
	c.validateShards(&p, addrs, nodes)
	c.validateMounts(&p)
	c.Keeper.validate(&p)
	c.validateClickHouse(&p, addrs)
	c.validateTables(&p)
	c.validateS3(&p)
	c.Security.validate(&p)
	if c.Audit.JournalMaxAge < 0 {
		p.add("audit.journal_max_age", "%v: want a duration, 0 for the default (%v)", c.Audit.JournalMaxAge, DefaultJournalMaxAge)
	}
	return errors.Join(p...)
}

type problems []error

func (p *problems) add(key, format string, args ...any) {
	*p = append(*p, fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, args...)))
}

// required reports key when value is empty and says whether it is set.
func (p *problems) required(key, value string) bool {
	if value == "" {
		p.add(key, "required")
		return false
	}
	return true
}

// unique reports key when value was already used by another key of seen.
func (p *problems) unique(seen map[string]string, key, value, what string) {
	if first, ok := seen[value]; ok {
		p.add(key, "%s %q already used by %s", what, value, first)
		return
	}
	seen[value] = key
}

// validateNodes checks the nodes and returns them by name.
func (c *Cluster) validateNodes(p *problems, addrs map[string]string) map[string]*Node {
	nodes := map[string]*Node{}
	for i := range c.Nodes {
		n := &c.Nodes[i]
		key := fmt.Sprintf("nodes[%d]", i)
		if p.required(key+".name", n.Name) {
			if _, ok := nodes[n.Name]; ok {
				p.add(key+".name", "node name %q already used", n.Name)
			}
			nodes[n.Name] = n
		}
		p.address(addrs, key+".peer_addr", n.PeerAddr)
		p.required(key+".data_dir", n.DataDir)
		if n.ClientAddr != "" {
			p.address(addrs, key+".client_addr", n.ClientAddr)
		}
		c.secureClientAddr(p, addrs, key, n.SecureClientAddr)
	}
	return nodes
}

// secureClientAddr checks the optional TLS client address under key.
func (c *Cluster) secureClientAddr(p *problems, addrs map[string]string, key, addr string) {
	if addr == "" {
		return
	}
	p.address(addrs, key+".secure_client_addr", addr)
	if !c.Security.ClientTLS.Enabled() {
		p.add(key+".secure_client_addr", "needs security.client_tls (cert_file, key_file)")
	}
}

// validateMounts checks the mount table and that every node with a client
// endpoint hosts each shard the endpoint routes to.
func (c *Cluster) validateMounts(p *problems) {
	if c.RootShard != "" {
		if _, err := c.Shard(c.RootShard); err != nil {
			p.add("root_shard", "no shard %q; known shards: %s", c.RootShard, known(c.shardNames()))
		}
	}
	paths := map[string]string{}
	for i, m := range c.Mounts {
		key := fmt.Sprintf("mounts[%d]", i)
		if p.required(key+".path", m.Path) {
			if err := mountPath(m.Path); err != nil {
				p.add(key+".path", "%q: %v", m.Path, err)
			}
			p.unique(paths, key+".path", m.Path, "mount path")
		}
		if p.required(key+".shard", m.Shard) {
			if _, err := c.Shard(m.Shard); err != nil {
				p.add(key+".shard", "no shard %q; known shards: %s", m.Shard, known(c.shardNames()))
			}
		}
	}
	for i, n := range c.Nodes {
		if n.ClientAddr == "" && n.SecureClientAddr == "" || len(c.Shards) == 0 {
			continue
		}
		hosted := map[string]bool{}
		for _, s := range c.Shards {
			for _, m := range s.Members {
				hosted[s.Name] = hosted[s.Name] || m.Node == n.Name
			}
		}
		for _, shard := range c.EndpointShards() {
			if !hosted[shard] {
				p.add(fmt.Sprintf("nodes[%d]", i), "the client endpoint of node %s routes to shard %s, which has no member on the node", n.Name, shard)
			}
		}
	}
}

// mountPath checks a mount point: absolute, canonical, not / and not under
// /zookeeper (ZooKeeper's own, always the root shard's) or /xkeeper.
func mountPath(path string) error {
	switch {
	case !strings.HasPrefix(path, "/") || path == "/":
		return errors.New("want an absolute path other than /")
	case strings.HasSuffix(path, "/") || strings.Contains(path, "//") || strings.Contains(path+"/", "/./") || strings.Contains(path+"/", "/../"):
		return errors.New("want a canonical path: no empty, . or .. names, no trailing /")
	}
	for _, reserved := range []string{"/zookeeper", "/xkeeper", "/xkeeper-sessions"} {
		if path == reserved || strings.HasPrefix(path, reserved+"/") {
			return fmt.Errorf("%s and below stay on the root shard", reserved)
		}
	}
	return nil
}

// validateMemberNode checks a member placed on a node: the node exists,
// hosts no other member of the shard, and gives the member its raft
// address.
func (c *Cluster) validateMemberNode(p *problems, key string, m Member, nodes map[string]*Node, onNode map[string]string) {
	n, ok := nodes[m.Node]
	if !ok {
		p.add(key+".node", "no node %q; known nodes: %s", m.Node, known(c.nodeNames()))
		return
	}
	if other, ok := onNode[m.Node]; ok {
		p.add(key+".node", "node %q already hosts member %s of this shard: a node hosts one member of each shard", m.Node, other)
	}
	onNode[m.Node] = m.ID
	if m.RaftAddr != n.PeerAddr {
		p.add(key+".raft_addr", "%q: a member on node %s has the node's peer_addr %q as its raft address; leave it out", m.RaftAddr, n.Name, n.PeerAddr)
	}
}

func (c *Cluster) validateShards(p *problems, addrs map[string]string, nodes map[string]*Node) {
	var dirs []keyed
	nodeDirs := map[string]string{}
	if len(c.Shards) == 0 {
		p.add("shards", "required: list at least one shard")
		return
	}
	names := map[string]string{}
	ids := map[string]string{}
	for i, s := range c.Shards {
		key := fmt.Sprintf("shards[%d]", i)
		if p.required(key+".name", s.Name) {
			p.unique(names, key+".name", s.Name, "shard name")
		}
		if len(s.Members) == 0 {
			p.add(key+".members", "required: list at least one member")
		}
		onNode := map[string]string{}
		for j, m := range s.Members {
			mkey := fmt.Sprintf("%s.members[%d]", key, j)
			if p.required(mkey+".id", m.ID) {
				p.unique(ids, mkey+".id", m.ID, "member id")
				if !validID(m.ID) {
					p.add(mkey+".id", "%q: use letters, digits and . _ - (not first)", m.ID)
				}
			}
			p.address(addrs, mkey+".client_addr", m.ClientAddr)
			if m.Node != "" {
				c.validateMemberNode(p, mkey, m, nodes, onNode)
			} else {
				p.address(addrs, mkey+".raft_addr", m.RaftAddr)
			}
			if m.HTTPAddr != "" {
				p.address(addrs, mkey+".http_addr", m.HTTPAddr)
			}
			c.secureClientAddr(p, addrs, mkey, m.SecureClientAddr)
			if p.required(mkey+".data_dir", m.DataDir) {
				dirs = append(dirs, keyed{mkey + ".data_dir", filepath.Clean(m.DataDir)})
			}
		}
	}
	for i := range c.Nodes {
		if c.Nodes[i].DataDir != "" {
			nodeDirs[filepath.Clean(c.Nodes[i].DataDir)] = fmt.Sprintf("nodes[%d].data_dir", i)
		}
	}
	separateDirs(p, dirs, nodeDirs)
}

// keyed is a value and the key it came from.
type keyed struct{ key, value string }

// separateDirs reports a member's data directory that is another's, lies
// inside another's, or is a node's (which holds its members' directories).
func separateDirs(p *problems, dirs []keyed, nodeDirs map[string]string) {
	for i, a := range dirs {
		if node, ok := nodeDirs[a.value]; ok {
			p.add(a.key, "%q is the data directory of %s: give the member its own", a.value, node)
		}
		for _, b := range dirs[i+1:] {
			switch {
			case a.value == b.value:
				p.add(b.key, "%q is already the data directory of %s", b.value, a.key)
			case strings.HasPrefix(b.value, a.value+string(filepath.Separator)):
				p.add(b.key, "%q lies inside %s %q", b.value, a.key, a.value)
			case strings.HasPrefix(a.value, b.value+string(filepath.Separator)):
				p.add(a.key, "%q lies inside %s %q", a.value, b.key, b.value)
			}
		}
	}
}

// MaxPacketBytesLimit bounds keeper.max_packet_bytes. A write of that
// size, with its caller's identities (proto.MaxIdentityBytes) and the
// entry's fields, is one Raft log entry, and raft-wal reads back none
// above 64 MiB (replica.MaxEntryBytes; raft-boltdb and the node log read
// more); half of that leaves room for a record restating a request (a
// cross-shard prepare) and is far above what ZooKeeper deployments set
// jute.maxbuffer to.
const MaxPacketBytesLimit = 32 << 20

// validID reports whether id is safe as a member id: it names directories
// (a node's data_dir/ID) and metric labels.
func validID(id string) bool {
	for i, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && (r == '.' || r == '_' || r == '-')) {
			return false
		}
	}
	return id != ""
}

// validateClickHouse checks the servers' names and addresses; an address
// may not repeat a keeper member's either.
func (c *Cluster) validateClickHouse(p *problems, addrs map[string]string) {
	names := map[string]string{}
	for i, s := range c.ClickHouse.Servers {
		key := fmt.Sprintf("clickhouse.servers[%d]", i)
		if p.required(key+".name", s.Name) {
			if strings.ContainsAny(s.Name, ": \t\n") {
				p.add(key+".name", "%q: a server name may not contain ':' or blanks", s.Name)
			}
			p.unique(names, key+".name", s.Name, "server name")
		}
		p.address(addrs, key+".address", s.Address)
	}
}

// validateS3 checks the s3 section when it is there.
func (c *Cluster) validateS3(p *problems) {
	s := c.S3
	if s == (S3{}) {
		return
	}
	if p.required("s3.endpoint", s.Endpoint) {
		if _, port, err := net.SplitHostPort(s.Endpoint); err != nil || port == "" {
			p.add("s3.endpoint", "%q: want host:port", s.Endpoint)
		}
	}
	p.required("s3.bucket", s.Bucket)
	// GC deletes unknown objects under the prefix: never the whole bucket.
	if p.required("s3.prefix", s.Prefix) && !strings.HasSuffix(s.Prefix, "/") {
		p.add("s3.prefix", "%q: must end with /", s.Prefix)
	}
	if s.OrphanGrace < 0 {
		p.add("s3.orphan_grace", "must not be negative, got %v", s.OrphanGrace)
	}
}

// validateTables checks that every entry names a known server and shard,
// that table comes with database, and that no two entries cover the same
// tables.
func (c *Cluster) validateTables(p *problems) {
	servers := map[string]bool{}
	for _, s := range c.ClickHouse.Servers {
		servers[s.Name] = true
	}
	shards := map[string]bool{}
	for _, s := range c.Shards {
		shards[s.Name] = true
	}
	seen := map[string]string{}
	for i, t := range c.Tables {
		key := fmt.Sprintf("tables[%d]", i)
		if p.required(key+".server", t.Server) && !servers[t.Server] {
			p.add(key+".server", "unknown server %q; clickhouse.servers has %s", t.Server, known(c.serverNames()))
		}
		if t.Table != "" && t.Database == "" {
			p.add(key+".database", "required with table")
		}
		if p.required(key+".shard", t.Shard) && !shards[t.Shard] {
			p.add(key+".shard", "unknown shard %q; shards has %s", t.Shard, known(c.shardNames()))
		}
		if first, ok := seen[t.scope()]; ok {
			p.add(key, "%s already assigned by %s", t.scope(), first)
		} else {
			seen[t.scope()] = key
		}
	}
}

// scope names the tables a Table entry covers, as errors show it.
func (t Table) scope() string {
	switch {
	case t.Table != "":
		return t.Server + ":" + t.Database + "." + t.Table
	case t.Database != "":
		return t.Server + ":" + t.Database + ".*"
	default:
		return t.Server + ":*"
	}
}

// address checks that addr is host:port and that no other key uses it.
func (p *problems) address(seen map[string]string, key, addr string) {
	if !p.required(key, addr) {
		return
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		p.add(key, "%q is not host:port: %v", addr, err)
		return
	}
	if host == "" {
		p.add(key, "%q has no host", addr)
		return
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		p.add(key, "%q: port must be a number from 1 to 65535", addr)
		return
	}
	// Loopback names of one port are one address (localhost:9000 is
	// 127.0.0.1:9000): two entries so named are one server twice.
	if ip := net.ParseIP(host); strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback() {
		host = "127.0.0.1"
	}
	p.unique(seen, key, strings.ToLower(net.JoinHostPort(host, port)), "address")
}

// Bounds below mirror hashicorp/raft's ValidateConfig, so that a bad value is
// reported here under its key rather than when raft starts.
func (k Keeper) validate(p *problems) {
	atLeast := []struct {
		key   string
		value time.Duration
		min   time.Duration
	}{
		{"tick", k.Tick, time.Millisecond},
		{"min_session_timeout", k.MinSessionTimeout, 0},
		{"max_session_timeout", k.MaxSessionTimeout, 0},
		{"snapshot_interval", k.SnapshotInterval, 5 * time.Millisecond},
		{"heartbeat_timeout", k.HeartbeatTimeout, 5 * time.Millisecond},
		{"election_timeout", k.ElectionTimeout, 5 * time.Millisecond},
		{"leader_lease_timeout", k.LeaderLeaseTimeout, 5 * time.Millisecond},
		{"commit_timeout", k.CommitTimeout, time.Millisecond},
		{"tx_deadline", k.TxDeadline, 10 * time.Millisecond},
		{"lock_wait_max", k.LockWaitMax, 0},
		{"lock_grace", k.LockGrace, 0},
		{"decision_hold", k.DecisionHold, 0},
		{"leader_balance_interval", k.LeaderBalanceInterval, 0},
		{"log_stall_timeout", k.LogStallTimeout, 0},
	}
	for _, d := range atLeast {
		if d.value < d.min {
			p.add("keeper."+d.key, "must be at least %v, got %v", d.min, d.value)
		}
	}
	if k.LogStallTimeout > 0 && k.LogStallTimeout < k.HeartbeatTimeout {
		p.add("keeper.log_stall_timeout", "must be 0 (off) or at least keeper.heartbeat_timeout %v, got %v", k.HeartbeatTimeout, k.LogStallTimeout)
	}
	counts := []struct {
		key   string
		value int
		min   int
	}{
		{"max_packet_bytes", k.MaxPacketBytes, 1},
		{"snapshot_threshold", k.SnapshotThreshold, 1},
		{"trailing_logs", k.TrailingLogs, MinTrailingLogs},
		{"max_batch_requests", k.MaxBatchRequests, 1},
		{"gc_percent", k.GCPercent, 1},
		{"max_watches_per_session", k.MaxWatchesPerSession, 1},
		{"max_watches_per_member", k.MaxWatchesPerMember, 1},
	}
	for _, n := range counts {
		if n.value < n.min {
			p.add("keeper."+n.key, "must be at least %d, got %d", n.min, n.value)
		}
	}
	if k.MaxPacketBytes > MaxPacketBytesLimit {
		p.add("keeper.max_packet_bytes", "must be at most %d (a write is a Raft log entry, which every log store must read back), got %d",
			MaxPacketBytesLimit, k.MaxPacketBytes)
	}
	if k.MaxWatchesPerMember < k.MaxWatchesPerSession {
		p.add("keeper.max_watches_per_member", "%d is below keeper.max_watches_per_session %d", k.MaxWatchesPerMember, k.MaxWatchesPerSession)
	}
	if k.MaxQueuedBytesPerConnection < 2*k.MaxPacketBytes {
		p.add("keeper.max_queued_bytes_per_connection", "must be at least twice keeper.max_packet_bytes (%d: a largest reply beside those before it), got %d",
			2*k.MaxPacketBytes, k.MaxQueuedBytesPerConnection)
	}
	if len(k.AvailabilityZone) > MaxAvailabilityZoneBytes || !utf8.ValidString(k.AvailabilityZone) {
		p.add("keeper.availability_zone", "must be UTF-8 of at most %d bytes, got %q", MaxAvailabilityZoneBytes, k.AvailabilityZone)
	}
	if k.LockWait != "reject" && k.LockWait != "delay" {
		p.add("keeper.lock_wait", "must be reject or delay, got %q", k.LockWait)
	}
	if k.LogStore != "" && k.LogStore != "wal" && k.LogStore != "node" && k.LogStore != "bolt" {
		p.add("keeper.log_store", "must be wal, node or bolt, got %q", k.LogStore)
	}
	if k.LeaderLeaseTimeout > k.HeartbeatTimeout {
		p.add("keeper.leader_lease_timeout", "%v is above keeper.heartbeat_timeout %v", k.LeaderLeaseTimeout, k.HeartbeatTimeout)
	}
	if k.ElectionTimeout < k.HeartbeatTimeout {
		p.add("keeper.election_timeout", "%v is below keeper.heartbeat_timeout %v", k.ElectionTimeout, k.HeartbeatTimeout)
	}
	if k.Tick > 0 {
		lo, hi := k.SessionTimeoutBounds()
		if lo > hi {
			p.add("keeper.min_session_timeout", "%v%s is above keeper.max_session_timeout %v%s",
				lo, defaultNote(k.MinSessionTimeout, "2*keeper.tick"),
				hi, defaultNote(k.MaxSessionTimeout, "20*keeper.tick"))
		}
	}
}

func defaultNote(set time.Duration, rule string) string {
	if set == 0 {
		return " (" + rule + ")"
	}
	return ""
}

package keeper

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/nodelog"
	"github.com/xkeeper/xkeeper/keeper/peerlink"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/keeper/replica"
	"github.com/xkeeper/xkeeper/keeper/server"
	"github.com/xkeeper/xkeeper/xshard"
)

// Member is one running member of a keeper shard.
type Member struct {
	Replica *replica.Replica
	Server  *server.Server
	XShard  *xshard.Service
	router  *xshard.Router
}

// Options adjusts a member beyond the cluster file.
type Options struct {
	Logger *slog.Logger
	Clock  func() time.Time // wall clock stamped on entries (fault tests skew it)
	XHook  xshard.Hook      // fault injection in the transaction driver (tests only)
	// HideKeeperSystem has the member's server answer NoNode under
	// /keeper, as ZooKeeper does, so that ClickHouse sees no feature
	// flags (server.Config.HideKeeperSystem; measurements only).
	HideKeeperSystem bool
	// Join starts a member with no state as a newcomer to its running
	// shard: it learns the shard's identity from the other members and
	// waits for `xkeeper member add` instead of bootstrapping.
	Join bool
	// Bootstrap starts a member whose data directory holds nothing as one
	// of a new shard's first members (serve --bootstrap; MarkBootstrap does
	// the same from the directory): the shard's first member in the
	// cluster file bootstraps it with a new random identity, the others
	// take that identity from it (see chooseStart). Without Join or
	// Bootstrap, a member refuses to start on an empty data directory.
	Bootstrap bool
	// Identity, with Bootstrap, has every member bootstrap the new shard
	// itself with this identity (replica.NewIdentity), as members restored
	// from one backup start with one: for programs and tests that start
	// members unable to reach each other yet. The members must be given
	// the same cluster file.
	Identity string
	// PeerPort, when set, is the raft port the member shares with the
	// members of other shards its process hosts (StartNode); else it opens
	// its own at its raft address.
	PeerPort *replica.PeerPort
	// NodeLog, when set, is the Raft log the member shares with the
	// members of other shards its process hosts (StartNode).
	NodeLog *nodelog.Log
}

// TuneGC applies keeper.gc_percent to the process unless GOGC is set.
func TuneGC(k config.Keeper) {
	if os.Getenv("GOGC") == "" && k.GCPercent > 0 {
		debug.SetGCPercent(k.GCPercent)
	}
}

// Start opens the member id of the cluster: its Raft replica in its data
// directory and its client port.
func Start(c *config.Cluster, id string, opts Options) (*Member, error) {
	shard, self, err := c.Member(id)
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	log := opts.Logger.With("shard", shard.Name)
	k := c.Keeper
	sec := c.Security
	auth, err := PeerAuth(c, log)
	if err != nil {
		return nil, err
	}
	var clientTLS *tls.Config
	if self.SecureClientAddr != "" {
		if clientTLS, err = sec.ClientTLS.ServerConfig(); err != nil {
			return nil, err
		}
	}
	peers := peersOf(shard)
	mode, err := chooseStart(&membership{shard: shard, auth: auth}, id, self.DataDir, opts, log)
	if err != nil {
		return nil, err
	}
	r, err := replica.Open(replica.Config{
		Join: mode.join, Bootstrap: mode.bootstrap, Identity: mode.identity,
		Shard: shard.Name, ID: id, DataDir: self.DataDir, Peers: peers, Fsync: k.Fsync, LogStore: k.LogStore,
		HeartbeatTimeout: k.HeartbeatTimeout, ElectionTimeout: k.ElectionTimeout,
		LeaderLeaseTimeout: k.LeaderLeaseTimeout, CommitTimeout: k.CommitTimeout,
		SnapshotThreshold: uint64(k.SnapshotThreshold), SnapshotInterval: k.SnapshotInterval,
		TrailingLogs: uint64(k.TrailingLogs), MaxBatch: k.MaxBatchRequests, DecisionHold: k.DecisionHold,
		Clock: opts.Clock, Logger: log, Auth: auth, PeerPort: opts.PeerPort, NodeLog: opts.NodeLog,
		LogStallTimeout: k.LogStallTimeout, AvailabilityZone: k.AvailabilityZone,
	})
	if err != nil {
		return nil, emptyDirHint(err, shard, self)
	}
	router := MemberRouter(c, auth, log)
	xs := xshard.NewService(localShard{name: shard.Name, r: r}, router, log)
	xs.Hook = opts.XHook
	xs.Deadline, xs.LockGrace = k.TxDeadline, k.LockGrace
	xs.Takeover = max(xs.Takeover, 4*k.LockGrace)
	xs.MaxMessage = min(k.MaxPacketBytes, proto.DefaultMaxPacket) // the member router's clients send at most the default
	minT, maxT := k.SessionTimeoutBounds()
	s := server.New(server.Config{
		Addr: self.ClientAddr, DataDir: self.DataDir, Tick: k.Tick,
		MinSessionTimeout: minT, MaxSessionTimeout: maxT, MaxPacket: k.MaxPacketBytes, Logger: log,
		XTransaction: xs.Run, LockWait: lockWait(k), RoutedLockWait: k.LockWaitMax, LockGrace: k.LockGrace, Takeover: xs.Takeover, EarlyReplies: k.EarlyReplies,
		Peers: auth, SecureAddr: self.SecureClientAddr, TLS: clientTLS,
		FourLetterWords: sec.AllowedFourLetterWords(), MaxConnsPerIP: sec.ConnectionsPerIP(),
		SuperDigest: sec.SuperDigest, MaxWatchesPerSession: k.MaxWatchesPerSession, MaxWatchesPerMember: k.MaxWatchesPerMember,
		MaxQueuedBytes: k.MaxQueuedBytesPerConnection, HideKeeperSystem: opts.HideKeeperSystem,
	}, r)
	if err := s.Start(); err != nil {
		r.Close()
		return nil, err
	}
	r.ServeSessions(func(c net.Conn) { s.ServeMemberSession(c) })
	xs.Start(200 * time.Millisecond)
	return &Member{Replica: r, Server: s, XShard: xs, router: router}, nil
}

// peersOf lists a shard's members as its replicas know them.
func peersOf(sh *config.Shard) []replica.Peer {
	peers := make([]replica.Peer, len(sh.Members))
	for i, m := range sh.Members {
		peers[i] = replica.Peer{ID: m.ID, RaftAddr: m.RaftAddr}
	}
	return peers
}

// dialLink opens a member's link of kind magic to the member at addr: it
// is closed by close, or when ctx ends.
func dialLink(ctx context.Context, auth *peerlink.Auth, addr, magic string) (conn net.Conn, close func(), err error) {
	conn, err = auth.DialMember(ctx, addr, magic)
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	return conn, func() { stop(); conn.Close() }, nil
}

// PeerAuth returns what members of the cluster prove themselves with: the
// cluster secret, peer TLS or both.
func PeerAuth(c *config.Cluster, log *slog.Logger) (*peerlink.Auth, error) {
	sec := c.Security
	return peerlink.New(peerlink.Config{Secret: sec.ClusterSecret,
		CAFile: sec.PeerTLS.CAFile, CertFile: sec.PeerTLS.CertFile, KeyFile: sec.PeerTLS.KeyFile}, log)
}

// MemberRouter returns a router whose sessions are member links,
// authenticated before ZooKeeper's handshake, so that they may carry the
// cross-shard protocol's messages. A session goes to the member's peer
// port (on a node, the one port of all its shards), naming the shard; a
// peer port that serves no sessions (an older version's) is passed over
// for the member's client port, entered with the member magic.
func MemberRouter(c *config.Cluster, auth *peerlink.Auth, log *slog.Logger, opts ...client.Option) *xshard.Router {
	type peer struct{ addr, shard string }
	peers := map[string]peer{} // by client address, which the router dials
	for _, sh := range c.Shards {
		for _, m := range sh.Members {
			peers[m.ClientAddr] = peer{m.RaftAddr, sh.Name}
		}
	}
	var passed portsPassed
	dial := client.WithDialer(func(ctx context.Context, _, addr string) (net.Conn, error) {
		if p, ok := peers[addr]; ok && p.addr != "" && !passed.skip(p.addr) {
			conn, err := replica.DialSession(ctx, auth, p.addr, p.shard)
			if !errors.Is(err, replica.ErrNoSession) {
				return conn, err
			}
			passed.add(p.addr)
		}
		return auth.DialMember(ctx, addr, peerlink.SessionMagic)
	})
	return xshard.NewRouter(c, log, append([]client.Option{dial}, opts...)...)
}

// portsPassed remembers, for a minute, the peer ports that served no
// member session: an older member's (whose port would log each try as a
// link from another shard) or a node's still starting. Sessions to them go
// straight to the client port meanwhile.
type portsPassed struct {
	mu    sync.Mutex
	until map[string]time.Time
}

func (p *portsPassed) skip(addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Now().Before(p.until[addr])
}

func (p *portsPassed) add(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.until == nil {
		p.until = map[string]time.Time{}
	}
	p.until[addr] = time.Now().Add(time.Minute)
}

func lockWait(k config.Keeper) time.Duration {
	if k.LockWait == "delay" {
		return k.LockWaitMax
	}
	return 0
}

// Close stops the transaction service, the client port, then the replica.
func (m *Member) Close() error {
	m.XShard.Close()
	m.router.Close()
	return errors.Join(m.Server.Close(), m.Replica.Close())
}

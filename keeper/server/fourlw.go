package server

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/xkeeper/xkeeper/keeper/fsm"
)

// fourLetterWords are the admin commands served on the client port, in
// ZooKeeper's text formats.
var fourLetterWords = map[string]func(*Server) string{
	"ruok": func(*Server) string { return "imok" },
	"isro": func(*Server) string { return "rw" },
	"srvr": func(s *Server) string { return s.srvr(false) },
	"stat": func(s *Server) string { return s.srvr(s.allows("cons")) }, // the client list only where cons is allowed
	"mntr": (*Server).mntr,
	"conf": (*Server).conf,
	"cons": (*Server).cons,
	"wchs": (*Server).wchs,
	"dirs": (*Server).dirs,
	"envi": (*Server).envi,
	"srst": func(s *Server) string { s.stats.reset(); return "Server stats reset.\n" },
	"crst": func(s *Server) string { s.stats.reset(); return "Connection stats have been reset.\n" },
}

// allows reports whether the operator allows a 4-letter word.
func (s *Server) allows(word string) bool {
	allowed := s.cfg.FourLetterWords
	return allowed == nil || slices.Contains(allowed, word) || slices.Contains(allowed, "*")
}

func (s *Server) mode() string {
	if s.replica.IsLeader() {
		return "leader"
	}
	return "follower"
}

func (s *Server) snapshotState() (zxid int64, nodes int, ephemerals int) {
	s.replica.View(func(st *fsm.State) {
		zxid, nodes, ephemerals = st.Zxid(), st.NodeCount(), st.EphemeralCount()
	})
	return
}

func (s *Server) dataSize() (size int64) {
	s.replica.View(func(st *fsm.State) { size = st.DataSize() })
	return size
}

func (s *Server) latency() (min, avg, max float64) {
	n := s.stats.latCount.Load()
	if n == 0 {
		return 0, 0, 0
	}
	return float64(s.stats.latMin.Load()) / 1000, float64(s.stats.latSum.Load()) / float64(n) / 1000,
		float64(s.stats.latMax.Load()) / 1000
}

func (s *Server) connCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *Server) srvr(withClients bool) string {
	zxid, nodes, _ := s.snapshotState()
	lmin, lavg, lmax := s.latency()
	var b strings.Builder
	fmt.Fprintf(&b, "Zookeeper version: %s, built with %s\n", Version, runtime.Version())
	if withClients {
		b.WriteString("Clients:\n")
		b.WriteString(s.cons())
	}
	fmt.Fprintf(&b, "Latency min/avg/max: %.3f/%.4f/%.3f\n", lmin, lavg, lmax)
	fmt.Fprintf(&b, "Received: %d\nSent: %d\nConnections: %d\nOutstanding: %d\n",
		s.stats.received.Load(), s.stats.sent.Load(), s.connCount(), s.stats.inFlight.Load())
	fmt.Fprintf(&b, "Zxid: 0x%x\nMode: %s\nNode count: %d\n", zxid, s.mode(), nodes)
	return b.String()
}

func (s *Server) mntr() string {
	zxid, nodes, ephemerals := s.snapshotState()
	lmin, lavg, lmax := s.latency()
	wtotal := s.watches.held()
	lines := [][2]string{
		{"zk_version", Version},
		{"zk_server_state", s.mode()},
		{"zk_avg_latency", fmt.Sprintf("%.4f", lavg)},
		{"zk_max_latency", fmt.Sprintf("%.3f", lmax)},
		{"zk_min_latency", fmt.Sprintf("%.3f", lmin)},
		{"zk_packets_received", fmt.Sprint(s.stats.received.Load())},
		{"zk_packets_sent", fmt.Sprint(s.stats.sent.Load())},
		{"zk_num_alive_connections", fmt.Sprint(s.connCount())},
		{"zk_outstanding_requests", fmt.Sprint(s.stats.inFlight.Load())},
		{"zk_znode_count", fmt.Sprint(nodes)},
		{"zk_watch_count", fmt.Sprint(wtotal)},
		{"zk_ephemerals_count", fmt.Sprint(ephemerals)},
		{"zk_approximate_data_size", fmt.Sprint(s.dataSize())},
		{"zk_last_zxid", fmt.Sprintf("0x%x", zxid)},
		{"zk_uptime", fmt.Sprint(time.Since(s.started).Milliseconds())},
		{"zk_malformed_packets", fmt.Sprint(s.stats.malformed.Load())},
	}
	var xc fsm.XCounters
	var locks int
	var oldest int64
	s.replica.View(func(st *fsm.State) { xc, locks, oldest = st.XStats() })
	lines = append(lines,
		[2]string{"xk_tx_prepared", fmt.Sprint(xc.Prepared)},
		[2]string{"xk_tx_rejected", fmt.Sprint(xc.Rejected)},
		[2]string{"xk_tx_rejected_late", fmt.Sprint(xc.RejectedLate)},
		[2]string{"xk_tx_committed", fmt.Sprint(xc.Committed)},
		[2]string{"xk_tx_failed", fmt.Sprint(xc.Failed)},
		[2]string{"xk_tx_stale_decisions", fmt.Sprint(xc.Stale)},
		[2]string{"xk_tx_locks_held", fmt.Sprint(locks)},
		[2]string{"xk_tx_oldest_pending_ms", fmt.Sprint(oldest)},
		[2]string{"xk_early_replies", fmt.Sprint(s.replica.EarlyReplies())})
	if s.replica.IsLeader() {
		members, _ := s.replica.Members()
		voters := 0
		for _, m := range members {
			if m.Voter {
				voters++
			}
		}
		lines = append(lines, [2]string{"zk_followers", fmt.Sprint(len(members) - 1)},
			[2]string{"zk_synced_followers", fmt.Sprint(voters - 1)})
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%s\t%s\n", l[0], l[1])
	}
	return b.String()
}

func (s *Server) conf() string {
	var b strings.Builder
	fmt.Fprintf(&b, "clientPort=%s\n", portOf(s.Addr()))
	fmt.Fprintf(&b, "clientPortAddress=%s\n", s.Addr())
	fmt.Fprintf(&b, "dataDir=%s\n", s.cfg.DataDir)
	fmt.Fprintf(&b, "dataLogDir=%s\n", s.cfg.DataDir)
	fmt.Fprintf(&b, "tickTime=%d\n", s.cfg.Tick.Milliseconds())
	fmt.Fprintf(&b, "maxClientCnxns=0\n")
	fmt.Fprintf(&b, "minSessionTimeout=%d\n", s.cfg.MinSessionTimeout.Milliseconds())
	fmt.Fprintf(&b, "maxSessionTimeout=%d\n", s.cfg.MaxSessionTimeout.Milliseconds())
	fmt.Fprintf(&b, "serverId=%s\n", s.replica.ID())
	members, _ := s.replica.Members()
	for _, m := range members {
		role := "participant"
		if !m.Voter {
			role = "observer"
		}
		fmt.Fprintf(&b, "server.%s=%s:%s\n", m.ID, m.RaftAddr, role)
	}
	fmt.Fprintf(&b, "jute.maxbuffer=%d\n", s.cfg.MaxPacket)
	return b.String()
}

func portOf(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		return addr[i+1:]
	}
	return addr
}

func (s *Server) cons() string {
	type line struct {
		c       *conn
		session int64
		timeout int32
	}
	// A connection's session and timeout are set before it is attached
	// under mu, and not after: read under mu, only for attached ones.
	s.mu.Lock()
	lines := make([]line, 0, len(s.conns))
	for c := range s.conns {
		l := line{c: c}
		if c.attached {
			l.session, l.timeout = c.session, c.timeout
		}
		lines = append(lines, l)
	}
	s.mu.Unlock()
	sort.Slice(lines, func(i, j int) bool { return lines[i].c.established.Before(lines[j].c.established) })
	var b strings.Builder
	for _, l := range lines {
		c := l.c
		fmt.Fprintf(&b, " /%s[1](queued=0,recved=%d,sent=%d,sid=%s,est=%d,to=%d,lzxid=0x%x)\n",
			c.remote, c.received.Load(), c.sent.Load(), hexID(l.session),
			c.established.UnixMilli(), l.timeout, c.lastZxid.Load())
	}
	b.WriteString("\n")
	return b.String()
}

func (s *Server) wchs() string {
	conns, paths, total := s.watches.counts()
	return fmt.Sprintf("%d connections watching %d paths\nTotal watches:%d\n", conns, paths, total)
}

func (s *Server) dirs() string {
	var size int64
	filepath.Walk(s.cfg.DataDir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			size += info.Size()
		}
		return nil
	})
	return fmt.Sprintf("datadir_size: %d\nlogdir_size: %d\n", size, size)
}

func (s *Server) envi() string {
	host, _ := os.Hostname()
	wd, _ := os.Getwd()
	return fmt.Sprintf("Environment:\nzookeeper.version=%s\nhost.name=%s\ngo.version=%s\nos.name=%s\nos.arch=%s\nuser.dir=%s\n",
		Version, host, runtime.Version(), runtime.GOOS, runtime.GOARCH, wd)
}

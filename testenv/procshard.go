package testenv

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xkeeper/xkeeper/config"
)

// ProcessCluster runs every member of a cluster as its own `xkeeper serve`
// process, or every node (ClusterOptions.Nodes) as one hosting a member
// of each shard, for tests that kill real processes and benchmarks that
// measure a member's memory.
type ProcessCluster struct {
	t      testing.TB
	Config *config.Cluster
	File   string
	bin    string
	dir    string
	mu     sync.Mutex
	procs  map[string]*Process
	// Net holds the nodes' network namespaces (ClusterOptions.NetNS), or nil.
	Net *Net
}

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// XkeeperBinary builds cmd/xkeeper once per test binary and returns its path.
func XkeeperBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "xkeeper-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildBin = filepath.Join(dir, "xkeeper")
		out, err := exec.Command("go", "build", "-o", buildBin, "github.com/xkeeper/xkeeper/cmd/xkeeper").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build cmd/xkeeper: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// ProductionRaft puts config.Default's Raft timings back on a test
// cluster (ClusterOptions.Keeper), for measurements.
func ProductionRaft(k *config.Keeper) {
	d := config.Default()
	k.HeartbeatTimeout, k.ElectionTimeout, k.LeaderLeaseTimeout = d.HeartbeatTimeout, d.ElectionTimeout, d.LeaderLeaseTimeout
	k.CommitTimeout = d.CommitTimeout
}

// StartProcessCluster writes a cluster file and starts `xkeeper serve` for
// every member, then waits until each shard has a leader.
func StartProcessCluster(t testing.TB, o ClusterOptions) *ProcessCluster {
	t.Helper()
	if o.Shards == 0 {
		o.Shards = 1
	}
	if o.Members == 0 {
		o.Members = 3
	}
	dir := t.TempDir()
	cfg := layoutOf(t, dir, o)
	if o.Nodes > 0 {
		o.Members = o.Nodes
	}
	cfg.Keeper.Fsync = o.Fsync
	if o.Keeper != nil {
		o.Keeper(&cfg.Keeper)
	}
	ports := FreePorts(t, o.Shards*o.Members)
	for i := range cfg.Shards {
		for j := range cfg.Shards[i].Members {
			cfg.Shards[i].Members[j].HTTPAddr = fmt.Sprintf("127.0.0.1:%d", ports[i*o.Members+j])
		}
	}
	pc := &ProcessCluster{t: t, Config: cfg, File: filepath.Join(dir, "cluster.yaml"), bin: XkeeperBinary(t),
		dir: dir, procs: map[string]*Process{}}
	if o.NetNS && o.Nodes > 0 {
		pc.moveIntoNamespaces()
	}
	if err := cfg.Write(pc.File); err != nil {
		t.Fatal(err)
	}
	for _, n := range cfg.Nodes {
		pc.Start(n.Name)
	}
	for _, sh := range cfg.Shards {
		for _, m := range sh.Members {
			if m.Node == "" {
				pc.Start(m.ID)
			}
		}
	}
	for _, sh := range cfg.Shards {
		pc.WaitLeader(sh.Name)
	}
	return pc
}

// Start launches the process of a member, or of a node by its name, and
// waits until the client port of each member it serves answers ruok.
func (pc *ProcessCluster) Start(id string) {
	pc.t.Helper()
	pc.await(pc.launch(id))
}

// StartAll launches the processes of members or nodes by their names all
// at once (a whole cluster's restart), then waits for each as Start does.
func (pc *ProcessCluster) StartAll(ids ...string) {
	pc.t.Helper()
	launched := make([]launched, len(ids))
	for i, id := range ids {
		launched[i] = pc.launch(id)
	}
	for _, l := range launched {
		pc.await(l)
	}
}

// launched is a process started for a member or a node, not yet ready.
type launched struct {
	id      string
	members []string // the members it serves
	p       *Process
}

func (pc *ProcessCluster) launch(id string) launched {
	pc.t.Helper()
	flag, ids := "--member", []string{id}
	if _, hosted, err := pc.Config.Node(id); err == nil {
		flag, ids = "--node", hosted
	}
	args := []string{"serve", "--config", pc.File, flag, id, "--log-level", "warn"}
	pc.mu.Lock()
	if _, ok := pc.procs[id]; !ok {
		args = append(args, "--bootstrap") // its first start: the shard's first start
	}
	pc.mu.Unlock()
	cmd := exec.Command(pc.bin, args...)
	if pc.Net != nil && flag == "--node" {
		cmd = pc.Net.Command(id, pc.bin, args...)
	}
	p, err := StartProcess(pc.t, cmd, filepath.Join(pc.dir, id+".log"))
	if err != nil {
		pc.t.Fatal(err)
	}
	return launched{id: id, members: ids, p: p}
}

func (pc *ProcessCluster) await(l launched) {
	pc.t.Helper()
	err := l.p.WaitReady(30*time.Second, func(ctx context.Context) error {
		for _, id := range l.members {
			_, m, err := pc.Config.Member(id)
			if err != nil {
				return err
			}
			out, err := FourLetterWord(ctx, m.ClientAddr, "ruok")
			if err == nil && out != "imok" {
				err = fmt.Errorf("%s: ruok answered %q", id, out)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		pc.t.Fatalf("%s: %v\n%s", l.id, err, l.p.LogTail(60))
	}
	pc.mu.Lock()
	pc.procs[l.id] = l.p
	pc.mu.Unlock()
}

// Kill sends SIGKILL to the process of a member, or of a node by its name.
func (pc *ProcessCluster) Kill(id string) {
	if p := pc.Process(id); p != nil {
		p.Kill()
	}
}

// Pause stops the process of a member, or of a node by its name, with
// SIGSTOP (on), as a long garbage-collection pause or a descheduled virtual
// machine would: its connections stay open and what it sent before is
// still delivered. Off lets it go on (SIGCONT).
func (pc *ProcessCluster) Pause(id string, on bool) {
	sig := syscall.SIGCONT
	if on {
		sig = syscall.SIGSTOP
	}
	if p := pc.Process(id); p != nil {
		if err := p.Signal(sig); err != nil {
			pc.t.Fatalf("%s: %v: %v", id, sig, err)
		}
	}
}

// Running reports whether the process of a member, or of a node by its
// name, has been started and has not exited (a paused one runs).
func (pc *ProcessCluster) Running(id string) bool {
	p := pc.Process(id)
	if p == nil {
		return false
	}
	select {
	case <-p.Done():
		return false
	default:
		return true
	}
}

// moveIntoNamespaces gives every node a network namespace of its own and
// its members' addresses the node's, ports unchanged.
func (pc *ProcessCluster) moveIntoNamespaces() {
	names := make([]string, len(pc.Config.Nodes))
	for i, n := range pc.Config.Nodes {
		names[i] = n.Name
	}
	pc.Net = StartNet(pc.t, names...)
	rehost := func(addr *string, node string) {
		if *addr == "" {
			return
		}
		_, port, err := net.SplitHostPort(*addr)
		if err != nil {
			pc.t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		*addr = pc.Net.Addr(node, p)
	}
	for i := range pc.Config.Nodes {
		n := &pc.Config.Nodes[i]
		rehost(&n.PeerAddr, n.Name)
		rehost(&n.ClientAddr, n.Name)
	}
	for i := range pc.Config.Shards {
		for j := range pc.Config.Shards[i].Members {
			m := &pc.Config.Shards[i].Members[j]
			for _, a := range []*string{&m.ClientAddr, &m.RaftAddr, &m.HTTPAddr} {
				rehost(a, m.Node)
			}
		}
	}
}

// Stop kills every process of the cluster (Kill waits for each).
func (pc *ProcessCluster) Stop() {
	pc.mu.Lock()
	procs := maps.Clone(pc.procs)
	pc.mu.Unlock()
	for _, p := range procs {
		p.Kill()
	}
}

// Process returns the process of a member, or of a node by its name.
func (pc *ProcessCluster) Process(id string) *Process {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.procs[id]
}

// Servers returns a shard's client addresses.
func (pc *ProcessCluster) Servers(shard string) []string {
	sh, err := pc.Config.Shard(shard)
	if err != nil {
		pc.t.Fatal(err)
	}
	return sh.ClientAddrs()
}

// Leader returns the member reporting Mode: leader, or "".
func (pc *ProcessCluster) Leader(shard string) string {
	sh, _ := pc.Config.Shard(shard)
	for _, m := range sh.Members {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		mode, err := zkMode(ctx, m.ClientAddr)
		cancel()
		if err == nil && mode == "leader" {
			return m.ID
		}
	}
	return ""
}

// WaitLeader polls until a shard has a leader and returns its id.
func (pc *ProcessCluster) WaitLeader(shard string) string {
	pc.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if id := pc.Leader(shard); id != "" {
			return id
		}
		time.Sleep(20 * time.Millisecond)
	}
	pc.t.Fatalf("shard %s: no leader after 30s", shard)
	return ""
}

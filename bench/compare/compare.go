// Package compare runs the same workloads against a 3-member xkeeper shard
// and a 3-member Apache ZooKeeper 3.8 ensemble on one machine, measures
// both servers' memory with 0, N/10 and N znodes, the disk's fsync and the
// loopback round trip as floors, and xkeeper's cross-shard transactions
// over 3 shards, and writes the figures, the ratios and the goals
// beside them as BENCHMARKS.md.
//
//	bash bench/compare.sh            # the full run; writes BENCHMARKS.md at the repository root
//	bash bench/compare.sh --short    # the smoke form: seconds, tiny sizes, a temporary report
package compare

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/xkeeper/xkeeper/bench"
	"github.com/xkeeper/xkeeper/testenv"
)

// Settings shape a comparison run.
type Settings struct {
	Smoke     bool          // the -short form: tiny sizes, figures mean nothing
	Duration  time.Duration // measured length of each workload
	Warmup    time.Duration // unmeasured start of each workload
	Clients   []int         // client counts of every workload
	Ops       []string      // bench ops, each run against both servers
	DataSize  int           // bytes per znode, in workloads and the memory fill
	MultiOps  int           // creates in one "multi"
	KeySpace  int           // znodes get, set and exists pick from
	Width     int           // children of the wide parent for "children"
	Znodes    int           // largest memory point; the middle one is Znodes/10
	ZKHeap    string        // ZooKeeper's JVM -Xmx
	Settle    time.Duration // idle time before reading RSS
	Samples   int           // rounds of each floor measurement
	XKeys     int           // keys per shard of the cross-shard runs
	XOps      int           // setData ops per cross-shard transaction (and per baseline multi)
	Overrides []string      // NAME=value of the environment variables that changed the defaults
}

// Environment variables that change the settings; compare.sh passes them
// through to the test.
const (
	EnvDuration = "XKEEPER_BENCH_DURATION" // per workload, such as 10s
	EnvWarmup   = "XKEEPER_BENCH_WARMUP"
	EnvClients  = "XKEEPER_BENCH_CLIENTS" // such as 1,16,64
	EnvZnodes   = "XKEEPER_BENCH_ZNODES"  // largest memory point, such as 1000000
	EnvZKHeap   = "XKEEPER_BENCH_ZK_HEAP" // such as 2g
	EnvReport   = "XKEEPER_BENCH_REPORT"  // where to write the report
)

// DefaultSettings are the full run's settings (smoke false) or the smoke
// form's.
func DefaultSettings(smoke bool) Settings {
	s := Settings{
		Duration: 10 * time.Second, Warmup: 2 * time.Second, Clients: []int{1, 16, 64},
		Ops:      []string{"create", "set", "multi", "get", "exists", "children", "insert"},
		DataSize: 100, MultiOps: 4, KeySpace: 1000, Width: 1000, Znodes: 1_000_000, ZKHeap: "2g",
		Settle: 2 * time.Second, Samples: 2000, XKeys: 1000, XOps: 2,
	}
	if smoke {
		s.Smoke = true
		s.Duration, s.Warmup, s.Clients = 500*time.Millisecond, 200*time.Millisecond, []int{1, 4}
		s.KeySpace, s.Width, s.Znodes, s.Settle, s.Samples, s.XKeys = 100, 100, 1000, 0, 50, 100
	}
	return s
}

// SettingsFromEnv returns DefaultSettings(smoke) with the environment's
// overrides.
func SettingsFromEnv(smoke bool) (Settings, error) {
	s := DefaultSettings(smoke)
	for _, v := range []struct {
		name  string
		parse func(string) error
	}{
		{EnvDuration, durationInto(&s.Duration)},
		{EnvWarmup, durationInto(&s.Warmup)},
		{EnvClients, func(v string) (err error) { s.Clients, err = bench.ParseCounts(v); return err }},
		{EnvZnodes, func(v string) (err error) { s.Znodes, err = strconv.Atoi(v); return err }},
		{EnvZKHeap, func(v string) error { s.ZKHeap = v; return nil }},
	} {
		val := os.Getenv(v.name)
		if val == "" {
			continue
		}
		if err := v.parse(val); err != nil {
			return s, fmt.Errorf("%s=%q: %w", v.name, val, err)
		}
		s.Overrides = append(s.Overrides, v.name+"="+val)
	}
	if s.Znodes < 10 {
		return s, fmt.Errorf("%s=%d: want at least 10", EnvZnodes, s.Znodes)
	}
	return s, nil
}

func durationInto(d *time.Duration) func(string) error {
	return func(v string) (err error) { *d, err = time.ParseDuration(v); return err }
}

// Command is the command that reproduces a run with these settings.
func (s Settings) Command() string {
	cmd := "bash bench/compare.sh"
	if s.Smoke {
		cmd += " --short"
	}
	return strings.TrimSpace(strings.Join(s.Overrides, " ") + " " + cmd)
}

// maxClients is the largest client count: the one the cross-shard
// throughput goal is read at.
func (s Settings) maxClients() int { return slices.Max(s.Clients) }

// memoryPoints are the znode counts RSS is read at besides 0.
func (s Settings) memoryPoints() []int { return []int{s.Znodes / 10, s.Znodes} }

// Run measures everything, each part in its own subtest with its own
// servers, and returns the report; a part that failed or was skipped is
// named in Report.Missing and the rest is still reported.
func Run(t *testing.T, s Settings) *Report {
	r := &Report{Settings: s, Machine: CollectMachine(os.TempDir()), Started: time.Now()}
	for _, p := range []struct {
		name string
		run  func(*testing.T, *Report)
	}{
		{"floors", floors}, {"workloads", workloads}, {"memory", memory}, {"xshard", crossShard},
	} {
		var sub *testing.T
		t.Run(p.name, func(t *testing.T) { sub = t; p.run(t, r) })
		switch {
		case sub.Skipped():
			r.Missing = append(r.Missing, p.name+" (skipped)")
		case sub.Failed():
			r.Missing = append(r.Missing, p.name+" (failed)")
		}
	}
	r.Took = time.Since(r.Started)
	return r
}

// floors measures a 4 KiB write + fdatasync in the servers' temp
// directory and a loopback TCP round trip.
func floors(t *testing.T, r *Report) {
	fs, err := bench.FsyncLatency(t.TempDir(), r.Settings.Samples)
	if err != nil {
		t.Fatal(err)
	}
	rtt, err := bench.LoopbackRTT(5 * r.Settings.Samples)
	if err != nil {
		t.Fatal(err)
	}
	r.Floors = []bench.Result{fs, rtt}
	t.Logf("floors: fsync p50 %.3f ms, loopback p50 %.3f ms", fs.P50, rtt.P50)
}

// servers starts the 3-member ZooKeeper ensemble and the 3-member xkeeper
// shard (separate processes, fsync on, production Raft timings), both with
// their data under the test's temp directories.
func servers(t *testing.T, r *Report) (*testenv.ZooKeeper, *testenv.ProcessCluster) {
	z := testenv.StartZooKeeperWith(t, testenv.ZooKeeperOptions{Members: 3, MaxHeap: r.Settings.ZKHeap})
	r.Machine.setZooKeeper(z)
	xk := testenv.StartProcessCluster(t, testenv.ClusterOptions{Members: 3, Fsync: true, Keeper: testenv.ProductionRaft})
	return z, xk
}

// workloads runs every op at every client count against xkeeper, then
// ZooKeeper, with the servers' CPU per op; one client runs twice, once on
// a follower and once on the leader, since a write costs a follower more.
func workloads(t *testing.T, r *Report) {
	s := r.Settings
	z, xk := servers(t, r)
	sides := []struct {
		name   string
		pids   []int
		addr   func(where string) []string
		result func(p *Pair) *bench.Result
	}{
		{"xkeeper", xkeeperPIDs(xk), func(where string) []string { return xkeeperAddrs(xk, where) },
			func(p *Pair) *bench.Result { return &p.XKeeper }},
		{"ZooKeeper", zookeeperPIDs(z), func(where string) []string { return zookeeperAddrs(z, where) },
			func(p *Pair) *bench.Result { return &p.ZooKeeper }},
	}
	for _, op := range s.Ops {
		for _, clients := range s.Clients {
			wheres := []string{""}
			if clients == 1 {
				wheres = []string{"follower", "leader"}
			}
			for _, where := range wheres {
				var p Pair
				for _, side := range sides {
					o := bench.Options{Op: op, Clients: clients, Duration: s.Duration, Warmup: s.Warmup,
						DataSize: s.DataSize, MultiOps: s.MultiOps, KeySpace: s.KeySpace, Width: s.Width,
						Servers: side.addr(where), ServerCPU: func() (float64, error) { return bench.ProcessCPU(side.pids...) }}
					res, err := bench.Run(context.Background(), o)
					if err == nil && stalled(res, s.Duration) {
						res.Where = where
						rerun := fmt.Sprintf("%s %s at %s (a call of %.0f ms, %d requests)",
							side.name, op, clientsCell(res), res.Longest, res.Requests)
						t.Logf("%s: %s at %d clients (%s) stalled, measuring again: %+v", side.name, op, clients, where, res)
						res, err = bench.Run(context.Background(), o)
						if err == nil && stalled(res, s.Duration) {
							rerun += fmt.Sprintf(", and stalled again (a call of %.0f ms): its row means nothing", res.Longest)
						}
						r.Reruns = append(r.Reruns, rerun)
					}
					if err != nil {
						t.Fatalf("%s: %s at %d clients against %v: %v", side.name, op, clients, o.Servers, err)
					}
					res.Where = where
					*side.result(&p) = res
				}
				r.Pairs = append(r.Pairs, p)
				t.Logf("%-8s %-14s xkeeper %8.0f/s p99 %7.2f ms %6.0f µs CPU | zookeeper %8.0f/s p99 %7.2f ms %6.0f µs CPU",
					op, clientsCell(p.XKeeper), p.XKeeper.Throughput, p.XKeeper.P99, p.XKeeper.CPUPerOp,
					p.ZooKeeper.Throughput, p.ZooKeeper.P99, p.ZooKeeper.CPUPerOp)
			}
		}
	}
}

func xkeeperPIDs(xk *testenv.ProcessCluster) []int {
	var pids []int
	for _, m := range xk.Config.Shards[0].Members {
		pids = append(pids, xk.Process(m.ID).PID())
	}
	return pids
}

func zookeeperPIDs(z *testenv.ZooKeeper) []int {
	var pids []int
	for i := range z.Servers() {
		pids = append(pids, z.PID(i))
	}
	return pids
}

// stalled reports a run in which one call, counted or not, waited more
// than half the measured window: a pause of one server (a collection, a
// snapshot, a new session's connection) that the figures would misreport
// as its speed.
func stalled(res bench.Result, window time.Duration) bool {
	return res.Longest > float64(window.Milliseconds())/2
}

// xkeeperAddrs is every member's client address (where ""), the
// leader's, or a follower's.
func xkeeperAddrs(xk *testenv.ProcessCluster, where string) []string {
	leader := xk.WaitLeader("a")
	var out []string
	for _, m := range xk.Config.Shards[0].Members {
		if where == "" || (where == "leader") == (m.ID == leader) {
			out = append(out, m.ClientAddr)
		}
	}
	return pick(out, where)
}

// zookeeperAddrs is the same for the ZooKeeper ensemble.
func zookeeperAddrs(z *testenv.ZooKeeper, where string) []string {
	leader := z.Leader()
	var out []string
	for i, a := range z.Servers() {
		if where == "" || (where == "leader") == (i == leader) {
			out = append(out, a)
		}
	}
	return pick(out, where)
}

// pick keeps one address when the run is pinned to a member.
func pick(addrs []string, where string) []string {
	if where == "" || len(addrs) == 0 {
		return addrs
	}
	return addrs[:1]
}

// memory reads each member's RSS on fresh servers with 0 znodes, then
// after filling each server to every memory point with znodes of DataSize
// bytes, once every member has applied them.
func memory(t *testing.T, r *Report) {
	s := r.Settings
	z, xk := servers(t, r)
	type target struct {
		name  string
		addrs []string
		pids  []int
		into  func(m *Memory) *MemorySide
	}
	targets := []target{
		{"xkeeper", xkeeperAddrs(xk, ""), xkeeperPIDs(xk), func(m *Memory) *MemorySide { return &m.XKeeper }},
		{"zookeeper", z.Servers(), zookeeperPIDs(z), func(m *Memory) *MemorySide { return &m.ZooKeeper }},
	}
	points := append([]int{0}, s.memoryPoints()...)
	r.Memory = make([]Memory, len(points))
	for i, n := range points {
		r.Memory[i].Znodes = n
	}
	chunk := max(1, s.Znodes/100) // znodes per parent: 100 parents at the largest point
	for _, tg := range targets {
		base := make([]int64, len(tg.addrs))
		for i, a := range tg.addrs {
			c, err := znodeCount(a)
			if err != nil {
				t.Fatal(err)
			}
			base[i] = c
		}
		conn, err := bench.Connect(tg.addrs)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		acl := zk.WorldACL(zk.PermAll)
		if _, err := conn.Create("/rss", nil, 0, acl); err != nil {
			t.Fatal(err)
		}
		created, parents := int64(1), 0
		for i, n := range points {
			start := time.Now()
			for from := points[max(i-1, 0)]; from < n; from += chunk {
				parent := fmt.Sprintf("/rss/d%d", parents)
				parents++
				if _, err := conn.Create(parent, nil, 0, acl); err != nil {
					t.Fatal(err)
				}
				if err := bench.Fill(conn, parent, min(chunk, n-from), s.DataSize); err != nil {
					t.Fatal(err)
				}
				created += 1 + int64(min(chunk, n-from))
			}
			side := tg.into(&r.Memory[i])
			side.Fill = time.Since(start)
			if err := waitCounts(tg.addrs, base, created); err != nil {
				t.Fatalf("%s: %v", tg.name, err)
			}
			time.Sleep(s.Settle)
			for _, pid := range tg.pids {
				rss, err := bench.RSS(pid)
				if err != nil {
					t.Fatal(err)
				}
				side.RSS = append(side.RSS, rss)
			}
			t.Logf("%-9s %9d znodes: RSS %v MiB (filled in %v)", tg.name, n, mib(side.RSS), side.Fill.Round(time.Millisecond))
		}
	}
}

// znodeCount reads zk_znode_count from a member's mntr (xkeeper and
// ZooKeeper both answer it).
func znodeCount(addr string) (int64, error) {
	out, err := fourLetter(addr, "mntr")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(line, "zk_znode_count\t"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no zk_znode_count in mntr", addr)
}

// waitCounts waits until every member holds base+created znodes: a
// follower applies writes after the leader answered them.
func waitCounts(addrs []string, base []int64, created int64) error {
	deadline := time.Now().Add(2 * time.Minute)
	for i, a := range addrs {
		for {
			n, err := znodeCount(a)
			if err == nil && n >= base[i]+created {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("member %s has %d znodes (%v), want %d", a, n, err, base[i]+created)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func fourLetter(addr, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return testenv.FourLetterWord(ctx, addr, cmd)
}

// crossShard runs, on 3 shards × 3 members (separate processes, fsync on,
// production Raft timings), a one-shard multi of XOps setData ops beside a
// 2-shard transaction of the same ops at every client count, and a 3-shard
// transaction at the largest.
func crossShard(t *testing.T, r *Report) {
	s := r.Settings
	pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Shards: 3, Members: 3, Fsync: true, Keeper: testenv.ProductionRaft})
	run := func(clients, span int) {
		res, err := bench.RunX(context.Background(), bench.XOptions{Cluster: pc.Config, Clients: clients, Span: span,
			Duration: s.Duration, Warmup: s.Warmup, Ops: s.XOps, Keys: s.XKeys, Logger: quiet})
		if err != nil {
			t.Fatalf("%d-shard transactions at %d clients: %v", span, clients, err)
		}
		r.XShard = append(r.XShard, res)
		t.Logf("%-6s %2d clients: %7.0f/s p50 %6.2f ms p99 %6.2f ms", res.Op, clients, res.Throughput, res.P50, res.P99)
	}
	for _, clients := range s.Clients {
		run(clients, 1)
		run(clients, 2)
	}
	run(s.maxClients(), 3)
}

// quiet logs the cross-shard routers' warnings only, not every session.
var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

func mib(rss []int64) []int64 {
	out := make([]int64, len(rss))
	for i, b := range rss {
		out[i] = b >> 20
	}
	return out
}

// ReportPath is where the report goes: $XKEEPER_BENCH_REPORT, else def.
func ReportPath(def string) string { return cmp.Or(os.Getenv(EnvReport), def) }

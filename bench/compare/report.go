package compare

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xkeeper/xkeeper/bench"
)

// Report is everything a run measured.
type Report struct {
	Settings Settings
	Machine  Machine
	Started  time.Time
	Took     time.Duration
	Floors   []bench.Result // "fsync" and "loopback"
	Pairs    []Pair         // one per op and client count
	Memory   []Memory       // 0, Znodes/10, Znodes
	XShard   []bench.Result // "multi", "xtx-2" per client count, then "xtx-3"
	Reruns   []string       // workloads measured again after a stall (stalled)
	Missing  []string       // parts that failed or were skipped
}

// Pair is one workload against both servers.
type Pair struct{ XKeeper, ZooKeeper bench.Result }

// Memory is both servers' RSS at one znode count.
type Memory struct {
	Znodes             int
	XKeeper, ZooKeeper MemorySide
}

// MemorySide is one server's RSS per member and how long creating the
// znodes since the previous point took.
type MemorySide struct {
	RSS  []int64 // bytes, per member
	Fill time.Duration
}

// Sum is the RSS of all members.
func (m MemorySide) Sum() int64 {
	var s int64
	for _, b := range m.RSS {
		s += b
	}
	return s
}

// The goals of the write-path and cross-shard issues, as ratios
// xkeeper / ZooKeeper unless said otherwise.
const (
	goalWrites1     = 1.0  // write throughput at 1 client, at least
	goalWrites      = 1.5  // write throughput at more clients, at least
	goalInsert      = 1.2  // ClickHouse's insert sequence, at least
	goalWriteCPU    = 1.0  // server CPU per write, at most
	goalReads       = 1.5  // read throughput, at least
	goalWideReads   = 1.0  // children at the most clients, at least
	goalP99         = 1.0  // p99 of every workload, at most
	goalRSS         = 0.5  // RSS per znode, at most
	goalTxP50       = 1.3  // 2-shard transaction p50 over a one-shard multi's, at most
	goalTxP99       = 1.5  // the same for p99
	goalTxPerSec    = 2000 // cross-shard transactions per second at the largest client count, at least
	writeOpsString  = "create, set, multi"
	readOpsString   = "get, exists, children"
	insertOp        = "insert"
	wideReadOp      = "children"
	noGoal          = "-"
	measuredNothing = "-"
)

var (
	writeOps = []string{"create", "set", "multi"}
	readOps  = []string{"get", "exists", "children"}
)

// Goal is one line of the goals table.
type Goal struct{ Name, Measured, Target, Verdict string }

// Verdicts.
const (
	Met         = "met"
	Missed      = "missed"
	NotMeasured = "not measured"
)

// ratio is a/b, false when b is zero or either is not a number.
func ratio(a, b float64) (float64, bool) {
	r := a / b
	return r, b != 0 && !math.IsNaN(r) && !math.IsInf(r, 0)
}

func verdict(ok bool) string {
	if ok {
		return Met
	}
	return Missed
}

// pairGoal summarises f(xkeeper)/f(ZooKeeper) over the pairs that keep
// selects: the worst row decides.
func (r *Report) pairGoal(name string, keep func(bench.Result) bool, f func(bench.Result) float64, atLeast bool, target float64) Goal {
	g := Goal{Name: name, Target: targetString(atLeast, target, "×"), Verdict: NotMeasured, Measured: measuredNothing}
	worst, found := 0.0, false
	for _, p := range r.Pairs {
		if !keep(p.XKeeper) {
			continue
		}
		q, ok := ratio(f(p.XKeeper), f(p.ZooKeeper))
		if !ok {
			return g
		}
		if !found || atLeast && q < worst || !atLeast && q > worst {
			worst, found = q, true
			g.Measured = fmt.Sprintf("%.2f× (worst: %s at %s)", q, p.XKeeper.Op, clientsCell(p.XKeeper))
		}
	}
	if found {
		g.Verdict = verdict(atLeast && worst >= target || !atLeast && worst <= target)
	}
	return g
}

// rowGoal is the goal a workload row is held to, as the table shows it.
func (r *Report) rowGoal(x bench.Result) string {
	switch {
	case slices.Contains(writeOps, x.Op) && x.Clients == 1:
		return "≥ " + trimFloat(goalWrites1) + "×"
	case slices.Contains(writeOps, x.Op):
		return "≥ " + trimFloat(goalWrites) + "×"
	case x.Op == insertOp:
		return "≥ " + trimFloat(goalInsert) + "×"
	case x.Op == wideReadOp && x.Clients == r.Settings.maxClients():
		return "≥ " + trimFloat(goalWideReads) + "×"
	case slices.Contains(readOps, x.Op):
		return "≥ " + trimFloat(goalReads) + "×"
	}
	return noGoal
}

// ops selects the rows of the listed ops whose client count passes clients.
func ops(list []string, clients func(int) bool) func(bench.Result) bool {
	return func(x bench.Result) bool { return slices.Contains(list, x.Op) && clients(x.Clients) }
}

func anyClients(int) bool { return true }

func targetString(atLeast bool, v float64, unit string) string {
	if atLeast {
		return "≥ " + trimFloat(v) + unit
	}
	return "≤ " + trimFloat(v) + unit
}

func trimFloat(v float64) string {
	if v >= 1000 {
		return thousands(v)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// perZnode is the RSS one znode adds to one member: (sum at the largest
// point − sum at 0) / members / znodes.
func (r *Report) perZnode(side func(Memory) MemorySide) (float64, bool) {
	if len(r.Memory) < 2 {
		return 0, false
	}
	first, last := r.Memory[0], r.Memory[len(r.Memory)-1]
	a, b := side(first), side(last)
	if len(a.RSS) == 0 || len(b.RSS) != len(a.RSS) || last.Znodes == 0 {
		return 0, false
	}
	return float64(b.Sum()-a.Sum()) / float64(len(a.RSS)) / float64(last.Znodes), true
}

func xkSide(m Memory) MemorySide { return m.XKeeper }
func zkSide(m Memory) MemorySide { return m.ZooKeeper }

// xshard returns the cross-shard result of op at clients.
func (r *Report) xshard(op string, clients int) (bench.Result, bool) {
	for _, x := range r.XShard {
		if x.Op == op && x.Clients == clients {
			return x, true
		}
	}
	return bench.Result{}, false
}

// Goals compares the figures with the goals.
func (r *Report) Goals() []Goal {
	s := r.Settings
	most := s.maxClients()
	goals := []Goal{
		r.pairGoal("write throughput at 1 client ("+writeOpsString+", leader and follower)",
			ops(writeOps, func(c int) bool { return c == 1 }), throughput, true, goalWrites1),
		r.pairGoal("write throughput at more clients ("+writeOpsString+")",
			ops(writeOps, func(c int) bool { return c > 1 }), throughput, true, goalWrites),
		r.pairGoal("ClickHouse's insert sequence", ops([]string{insertOp}, anyClients), throughput, true, goalInsert),
		r.pairGoal("server CPU per write ("+writeOpsString+")", ops(writeOps, anyClients), cpuPerOp, false, goalWriteCPU),
		r.pairGoal("read throughput ("+readOpsString+", but children at "+clientsString(most)+")",
			func(x bench.Result) bool {
				return slices.Contains(readOps, x.Op) && !(x.Op == wideReadOp && x.Clients == most)
			}, throughput, true, goalReads),
		r.pairGoal("children throughput at "+clientsString(most), ops([]string{wideReadOp}, func(c int) bool { return c == most }),
			throughput, true, goalWideReads),
		r.pairGoal("p99 latency, every workload", func(bench.Result) bool { return true }, p99, false, goalP99),
	}
	rss := Goal{Name: fmt.Sprintf("RSS per znode at %s znodes", thousands(float64(s.Znodes))),
		Target: targetString(false, goalRSS, "×"), Verdict: NotMeasured, Measured: "-"}
	xb, okx := r.perZnode(xkSide)
	zb, okz := r.perZnode(zkSide)
	if q, ok := ratio(xb, zb); okx && okz && ok {
		rss.Measured = fmt.Sprintf("%.2f× (%.0f vs %.0f bytes)", q, xb, zb)
		rss.Verdict = verdict(q <= goalRSS)
	}
	goals = append(goals, rss)
	low := slices.Min(s.Clients)
	for _, lat := range []struct {
		name string
		f    func(bench.Result) float64
		goal float64
	}{{"p50", p50, goalTxP50}, {"p99", p99, goalTxP99}} {
		g := Goal{Name: fmt.Sprintf("2-shard transaction %s / one-shard multi %s, %s", lat.name, lat.name, clientsString(low)),
			Target: targetString(false, lat.goal, "×"), Verdict: NotMeasured, Measured: measuredNothing}
		tx, ok1 := r.xshard("xtx-2", low)
		multi, ok2 := r.xshard("multi", low)
		if q, ok := ratio(lat.f(tx), lat.f(multi)); ok1 && ok2 && ok {
			g.Measured = fmt.Sprintf("%.2f× (%.2f vs %.2f ms)", q, lat.f(tx), lat.f(multi))
			g.Verdict = verdict(q <= lat.goal)
		}
		goals = append(goals, g)
	}
	for _, span := range []int{2, 3} {
		g := Goal{Name: fmt.Sprintf("cross-shard transactions per second over %d shards, %s", span, clientsString(s.maxClients())),
			Target: targetString(true, goalTxPerSec, "/s"), Verdict: NotMeasured, Measured: "-"}
		if tx, ok := r.xshard(fmt.Sprintf("xtx-%d", span), s.maxClients()); ok {
			g.Measured = thousands(tx.Throughput) + "/s"
			g.Verdict = verdict(tx.Throughput >= goalTxPerSec)
		}
		goals = append(goals, g)
	}
	return goals
}

func clientsString(n int) string {
	if n == 1 {
		return "1 client"
	}
	return strconv.Itoa(n) + " clients"
}

// clientsCell is a row's client count, with the member the clients used
// when they used one: "1, leader".
func clientsCell(x bench.Result) string {
	if x.Where == "" {
		return strconv.Itoa(x.Clients)
	}
	return strconv.Itoa(x.Clients) + ", " + x.Where
}

func cpuCell(us float64) string {
	if us == 0 {
		return measuredNothing
	}
	return thousands(us)
}

func throughput(r bench.Result) float64 { return r.Throughput }
func cpuPerOp(r bench.Result) float64   { return r.CPUPerOp }
func p50(r bench.Result) float64        { return r.P50 }
func p99(r bench.Result) float64        { return r.P99 }

// thousands formats v rounded, with thin commas: 12,345.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func ms(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

func ratioCell(a, b float64) string {
	if q, ok := ratio(a, b); ok {
		return fmt.Sprintf("%.2f×", q)
	}
	return "n/a"
}

// table writes a Markdown table; every row has the header's cells.
func table(w io.Writer, header []string, rows [][]string) {
	line := func(cells []string) {
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	line(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
	}
	line(sep)
	for _, row := range rows {
		line(row)
	}
	fmt.Fprintln(w)
}

// resultRows is every figure of a list of results.
func resultRows(rs []bench.Result) [][]string {
	var rows [][]string
	for _, x := range rs {
		rows = append(rows, []string{x.Op, clientsCell(x), thousands(float64(x.Requests)), thousands(x.Throughput),
			ms(x.P50), ms(x.P90), ms(x.P99), ms(x.P999), ms(x.Max), cpuCell(x.CPUPerOp), bench.FormatErrors(x.Errors)})
	}
	return rows
}

var resultHeader = []string{"op", "clients", "requests", "ops/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms",
	"server CPU µs/op", "errors"}

func rssCell(m MemorySide) string {
	if len(m.RSS) == 0 {
		return "-"
	}
	per := make([]string, len(m.RSS))
	for i, b := range m.RSS {
		per[i] = strconv.FormatInt(b>>20, 10)
	}
	return fmt.Sprintf("%d MiB (%s)", m.Sum()>>20, strings.Join(per, " + "))
}

func fillCell(m Memory, side MemorySide) string {
	if m.Znodes == 0 || len(side.RSS) == 0 {
		return "-"
	}
	return side.Fill.Round(time.Millisecond).String()
}

// WriteMarkdown writes the report as BENCHMARKS.md.
func (r *Report) WriteMarkdown(w io.Writer) {
	s := r.Settings
	fmt.Fprintf(w, "# xkeeper and Apache ZooKeeper 3.8, side by side\n\n")
	if s.Smoke {
		fmt.Fprintf(w, "> **Smoke run** (`-short`): tiny sizes that prove the tool works end to end. Its figures and verdicts mean nothing.\n\n")
	}
	if len(r.Missing) > 0 {
		fmt.Fprintf(w, "> **Incomplete**: not measured: %s.\n\n", strings.Join(r.Missing, ", "))
	}
	fmt.Fprintf(w, "Measured %s in %v by `bench/compare`: a 3-member xkeeper shard (`xkeeper serve` processes, "+
		"production Raft timings) and a 3-member Apache ZooKeeper ensemble on one machine, both with fsync on and their "+
		"data on the same disk, loaded in turn by the same load generator (`bench`, go-zookeeper clients in the test process, "+
		"one session per client, closed loop).\n\n", r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Took.Round(time.Second))

	fmt.Fprintf(w, "## Goals\n\n")
	var rows [][]string
	for _, g := range r.Goals() {
		rows = append(rows, []string{g.Name, g.Measured, g.Target, g.Verdict})
	}
	table(w, []string{"what", "measured (xkeeper / ZooKeeper)", "goal", "verdict"}, rows)
	fmt.Fprintf(w, "Where the time goes, from profiles (pprof at `/debug/pprof/` on each member's `http_addr`), and what would close each gap: "+
		"[DESIGN-NOTES.md, Performance](DESIGN-NOTES.md#performance-where-the-time-goes).\n\n")

	fmt.Fprintf(w, "## Machine\n\n")
	m := r.Machine
	table(w, []string{"", ""}, [][]string{
		{"CPU", m.CPU}, {"cores", strconv.Itoa(m.Cores)}, {"memory", m.Memory}, {"kernel", m.Kernel}, {"OS", m.OS},
		{"data directories", m.Disk}, {"load average at start", m.Load}, {"Go", m.Go}, {"xkeeper", m.XKeeper},
		{"ZooKeeper", cmp.Or(m.ZooKeeper, "-")}, {"Java", cmp.Or(m.Java, "-")}, {"ZooKeeper JVM flags", code(m.JVMFlags)},
	})

	fmt.Fprintf(w, "## Reproduce\n\nFrom the repository root, on a quiet machine with `.ci/install-deps.sh` run once:\n\n"+
		"```sh\n%s\n```\n\n", s.Command())
	fmt.Fprintf(w, "Each workload: %v measured after %v of warm-up, at %s clients; %d-byte data; get/set/exists over %s keys; "+
		"children lists a parent of %s children; multi is %d creates; insert is ClickHouse's INSERT (a dedup multi with an "+
		"ephemeral-sequential lock, an ephemeral-sequential block number, then the multi that commits the part and a log entry). "+
		"Errors are counted by ZooKeeper code and left out of the latencies.\n\n",
		s.Duration, s.Warmup, joinInts(s.Clients), s.DataSize, thousands(float64(s.KeySpace)), thousands(float64(s.Width)), s.MultiOps)

	fmt.Fprintf(w, "## Floors\n\nNo keeper on this machine commits faster than the disk syncs, nor answers faster than a loopback round trip.\n\n")
	rows = nil
	for _, f := range r.Floors {
		name := map[string]string{"fsync": "4 KiB write + fdatasync (data directories' disk)", "loopback": "TCP round trip of 64 bytes on 127.0.0.1"}[f.Op]
		rows = append(rows, []string{cmp.Or(name, f.Op), thousands(float64(f.Requests)), ms3(f.P50), ms3(f.P90), ms3(f.P99), ms3(f.Max)})
	}
	table(w, []string{"floor", "rounds", "p50 ms", "p90 ms", "p99 ms", "max ms"}, rows)

	fmt.Fprintf(w, "## Workloads\n\nThroughput, p99 latency and the servers' CPU per operation (user and system time of "+
		"the 3 member processes over the measured part, divided by its operations), xkeeper / ZooKeeper. Writes are %s, "+
		"reads %s; with 1 client each workload runs twice, pinned to a follower and to the leader, otherwise the "+
		"sessions spread over the members.\n\n", writeOpsString, readOpsString)
	if len(r.Reruns) > 0 {
		fmt.Fprintf(w, "Measured a second time, the first having stalled (one request waited more than half the window): %s.\n\n",
			strings.Join(r.Reruns, "; "))
	}
	rows = nil
	for _, p := range r.Pairs {
		x, z := p.XKeeper, p.ZooKeeper
		rows = append(rows, []string{x.Op, clientsCell(x), thousands(x.Throughput), thousands(z.Throughput),
			ratioCell(x.Throughput, z.Throughput), ms(x.P99), ms(z.P99), ratioCell(x.P99, z.P99),
			cpuCell(x.CPUPerOp), cpuCell(z.CPUPerOp), ratioCell(x.CPUPerOp, z.CPUPerOp), r.rowGoal(x)})
	}
	table(w, []string{"op", "clients", "xkeeper ops/s", "ZooKeeper ops/s", "ratio", "xkeeper p99 ms", "ZooKeeper p99 ms",
		"p99 ratio", "xkeeper CPU µs/op", "ZooKeeper CPU µs/op", "CPU ratio", "throughput goal"}, rows)
	for _, side := range []struct {
		name string
		get  func(Pair) bench.Result
	}{{"xkeeper", func(p Pair) bench.Result { return p.XKeeper }}, {"ZooKeeper", func(p Pair) bench.Result { return p.ZooKeeper }}} {
		var rs []bench.Result
		for _, p := range r.Pairs {
			rs = append(rs, side.get(p))
		}
		fmt.Fprintf(w, "### %s, every figure\n\n", side.name)
		table(w, resultHeader, resultRows(rs))
	}

	fmt.Fprintf(w, "## Memory\n\nResident set size (VmRSS) of each member, summed over the 3 members (each member in "+
		"parentheses), on fresh servers, after creating znodes of %d bytes (in parents of %s, by multis of 100 creates) "+
		"and once every member has applied them (mntr zk_znode_count), then %v idle. For ZooKeeper that includes the "+
		"JVM's committed heap (`-Xmx%s`, serial GC), which grows in steps; for xkeeper the Go heap at the default GOGC.\n\n",
		s.DataSize, thousands(float64(max(1, s.Znodes/100))), s.Settle, s.ZKHeap)
	rows = nil
	for _, mem := range r.Memory {
		rows = append(rows, []string{thousands(float64(mem.Znodes)), rssCell(mem.XKeeper), rssCell(mem.ZooKeeper),
			fillCell(mem, mem.XKeeper), fillCell(mem, mem.ZooKeeper)})
	}
	table(w, []string{"znodes", "xkeeper RSS", "ZooKeeper RSS", "xkeeper fill time", "ZooKeeper fill time"}, rows)
	xb, okx := r.perZnode(xkSide)
	zb, okz := r.perZnode(zkSide)
	if okx && okz {
		fmt.Fprintf(w, "Per znode and member, (RSS at %s − RSS at 0) / %s: xkeeper %.0f bytes, ZooKeeper %.0f bytes: %s (goal ≤ %s×).\n\n",
			thousands(float64(s.Znodes)), thousands(float64(s.Znodes)), xb, zb, ratioCell(xb, zb), trimFloat(goalRSS))
	}

	fmt.Fprintf(w, "## Cross-shard transactions\n\n3 shards × 3 members (`xkeeper serve` processes, fsync on, production "+
		"Raft timings). `multi` is a one-shard multi of %d setData ops; `xtx-N` a transaction of the same %d ops over N "+
		"shards (two-phase commit), on %s keys per shard; a transaction refused because another holds a lock counts as an error.\n\n",
		s.XOps, s.XOps, thousands(float64(s.XKeys)))
	table(w, resultHeader, resultRows(r.XShard))
	rows = nil
	for _, c := range s.Clients {
		tx, ok1 := r.xshard("xtx-2", c)
		multi, ok2 := r.xshard("multi", c)
		if ok1 && ok2 {
			rows = append(rows, []string{strconv.Itoa(c), ratioCell(tx.P50, multi.P50), ratioCell(tx.P99, multi.P99), thousands(tx.Throughput)})
		}
	}
	fmt.Fprintf(w, "2-shard transaction over one-shard multi (goal: p50 ≤ %s×, p99 ≤ %s×):\n\n", trimFloat(goalTxP50), trimFloat(goalTxP99))
	table(w, []string{"clients", "p50 ratio", "p99 ratio", "2-shard tx/s"}, rows)
}

// KeptMarker starts the part of BENCHMARKS.md that other measurements
// write (the load, log-store and idle runs of package bench): WriteFile
// keeps what follows it in the file it replaces.
const KeptMarker = "<!-- Measured by other runs (package bench); bench/compare keeps everything below this line. -->"

// WriteFile writes the report to path, creating its directory; the part
// of the old file from KeptMarker on is kept.
func (r *Report) WriteFile(path string) error {
	var b bytes.Buffer
	r.WriteMarkdown(&b)
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if i := bytes.Index(old, []byte(KeptMarker)); i >= 0 {
		b.WriteString("\n")
		b.Write(old[i:])
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func ms3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

func code(s string) string {
	if s == "" {
		return "-"
	}
	return "`" + s + "`"
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

package compare

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/bench"
)

// TestCompare runs the comparison and writes its report.
//
//	go test -short ./bench/compare -run TestCompare -v     # smoke form: seconds; report in a temp dir
//	bash bench/compare.sh                                   # full run; BENCHMARKS.md at the repository root
//
// The full run (XKEEPER_BENCH=1 without -short) takes about half an hour
// on a 2-core machine and must have it to itself; nothing about speed is
// asserted in either form.
func TestCompare(t *testing.T) {
	smoke := testing.Short()
	if !smoke && os.Getenv("XKEEPER_BENCH") != "1" {
		t.Skip("comparison with ZooKeeper: go test -short for the smoke form; XKEEPER_BENCH=1 (bash bench/compare.sh) for the full run")
	}
	s, err := SettingsFromEnv(smoke)
	require.NoError(t, err)
	def := filepath.Join(repoRoot(), "BENCHMARKS.md")
	if smoke {
		def = filepath.Join(t.TempDir(), "BENCHMARKS.md")
	}
	path := ReportPath(def)
	r := Run(t, s)
	for _, m := range r.Missing {
		if strings.HasSuffix(m, "(skipped)") && !t.Failed() {
			t.Skipf("not measured: %v", r.Missing) // ZooKeeper not installed, and not required
		}
	}
	if err := r.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	t.Logf("report: %s", path)
	md, err := os.ReadFile(path)
	require.NoError(t, err)
	checkReport(t, r, string(md))
	if t.Failed() {
		t.Logf("the report:\n%s", md)
	}
}

// checkReport fails t unless md is a well-formed report of a complete run.
func checkReport(t *testing.T, r *Report, md string) {
	t.Helper()
	checkMarkdown(t, md)
	if len(r.Missing) > 0 {
		t.Errorf("parts not measured: %v", r.Missing)
	}
	s := r.Settings
	if got, want := len(r.Pairs), len(s.Ops)*rowsPerOp(s); got != want {
		t.Errorf("%d workload rows, want %d", got, want)
	}
	if got, want := len(r.XShard), 2*len(s.Clients)+1; got != want {
		t.Errorf("%d cross-shard rows, want %d", got, want)
	}
	if got, want := len(r.Memory), 3; got != want {
		t.Errorf("%d memory rows, want %d", got, want)
	}
	var all []bench.Result
	all = append(all, r.Floors...)
	all = append(all, r.XShard...)
	for _, p := range r.Pairs {
		all = append(all, p.XKeeper, p.ZooKeeper)
	}
	for _, res := range all {
		if res.Requests == 0 || res.Throughput <= 0 {
			t.Errorf("%s at %d clients: no request succeeded (errors %v)", res.Op, res.Clients, res.Errors)
		}
	}
	for _, p := range r.Pairs {
		if p.XKeeper.CPUPerOp <= 0 || p.ZooKeeper.CPUPerOp <= 0 {
			t.Errorf("%s at %s: server CPU per op %v and %v", p.XKeeper.Op, clientsCell(p.XKeeper), p.XKeeper.CPUPerOp, p.ZooKeeper.CPUPerOp)
		}
	}
	for _, m := range r.Memory {
		if len(m.XKeeper.RSS) != 3 || len(m.ZooKeeper.RSS) != 3 {
			t.Errorf("%d znodes: RSS of %d xkeeper and %d ZooKeeper members, want 3 each", m.Znodes, len(m.XKeeper.RSS), len(m.ZooKeeper.RSS))
		}
	}
	for _, g := range r.Goals() {
		if g.Verdict == NotMeasured {
			t.Errorf("goal %q not measured", g.Name)
		}
	}
	if r.Machine.ZooKeeper == "" || !strings.HasPrefix(r.Machine.ZooKeeper, "3.8") {
		t.Errorf("ZooKeeper version %q", r.Machine.ZooKeeper)
	}
}

// checkMarkdown fails t unless md has every section, balanced code fences,
// tables whose rows all have the header's cells, and no NaN or Inf.
func checkMarkdown(t *testing.T, md string) {
	t.Helper()
	for _, h := range []string{"# xkeeper and Apache ZooKeeper 3.8", "\n## Goals\n", "\n## Machine\n", "\n## Reproduce\n",
		"\n## Floors\n", "\n## Workloads\n", "\n### xkeeper, every figure\n", "\n### ZooKeeper, every figure\n",
		"\n## Memory\n", "\n## Cross-shard transactions\n", "bash bench/compare.sh"} {
		if !strings.Contains(md, h) {
			t.Errorf("report has no %q", strings.TrimSpace(h))
		}
	}
	for _, bad := range []string{"NaN", "Inf", "%!"} {
		if strings.Contains(md, bad) {
			t.Errorf("report contains %q", bad)
		}
	}
	if n := strings.Count(md, "```"); n%2 != 0 {
		t.Errorf("%d code fences", n)
	}
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "|") {
			continue
		}
		header := cells(lines[i])
		if i+1 >= len(lines) || strings.Trim(strings.ReplaceAll(lines[i+1], " ", ""), "|-") != "" {
			t.Errorf("line %d: table without a separator: %q", i+1, lines[i])
		}
		j := i + 1
		for ; j < len(lines) && strings.HasPrefix(lines[j], "|"); j++ {
			if got := len(cells(lines[j])); got != len(header) {
				t.Errorf("line %d: %d cells, header has %d: %q", j+1, got, len(header), lines[j])
			}
		}
		if j == i+2 {
			t.Errorf("line %d: table without rows", i+1)
		}
		i = j
	}
}

// rowsPerOp is how many workload rows one op has: one per client count,
// and two (follower, leader) for 1 client.
func rowsPerOp(s Settings) int {
	n := len(s.Clients)
	if slices.Contains(s.Clients, 1) {
		n++
	}
	return n
}

func cells(line string) []string {
	return strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
}

// TestReportMarkdown renders a made-up complete run: every section is
// there, well formed, and the goals read the right rows.
func TestReportMarkdown(t *testing.T) {
	s := DefaultSettings(false)
	res := func(op string, clients int, perSec, p50, p99 float64) bench.Result {
		return bench.Result{Op: op, Clients: clients, Requests: int(perSec * 10), Seconds: 10, Throughput: perSec,
			P50: p50, P90: p50 * 1.5, P99: p99, P999: p99 * 2, Max: p99 * 3}
	}
	r := &Report{Settings: s, Machine: CollectMachine(t.TempDir()), Started: time.Now(), Took: time.Minute,
		Floors: []bench.Result{res("fsync", 1, 2500, 0.37, 1.2), res("loopback", 1, 30000, 0.03, 0.08)}}
	r.Machine.ZooKeeper = "3.8.0-5a02a05eddb59aee6ac762f7ea82e92a68eb9c0f, built on 2022-02-25 08:49 UTC"
	for _, op := range s.Ops {
		for _, c := range s.Clients {
			wheres := []string{""}
			if c == 1 {
				wheres = []string{"follower", "leader"}
			}
			for _, where := range wheres {
				x, z := res(op, c, 3000, 1, 4), res(op, c, 1000, 2, 8)
				x.CPUPerOp, z.CPUPerOp = 300, 400
				x.Where, z.Where = where, where
				if op == "set" && c == 16 {
					x.Throughput = 1200 // 1.2×: misses the write goal
				}
				if op == "multi" && where == "follower" {
					x.Throughput, x.CPUPerOp = 900, 800 // 0.9×: misses the 1-client goal; 2× the CPU
				}
				x.Errors = map[string]int{"node exists (-110)": 2}
				r.Pairs = append(r.Pairs, Pair{x, z})
			}
		}
	}
	r.Memory = []Memory{
		{0, MemorySide{RSS: []int64{40 << 20, 40 << 20, 40 << 20}}, MemorySide{RSS: []int64{90 << 20, 90 << 20, 90 << 20}}},
		{100_000, MemorySide{RSS: []int64{60 << 20, 60 << 20, 60 << 20}, Fill: time.Second}, MemorySide{RSS: []int64{150 << 20, 150 << 20, 150 << 20}, Fill: 3 * time.Second}},
		{1_000_000, MemorySide{RSS: []int64{240 << 20, 240 << 20, 240 << 20}, Fill: 9 * time.Second}, MemorySide{RSS: []int64{690 << 20, 690 << 20, 690 << 20}, Fill: 30 * time.Second}},
	}
	for _, c := range s.Clients {
		r.XShard = append(r.XShard, res("multi", c, 2000, 2, 5), res("xtx-2", c, 2500, 4, 10))
	}
	r.XShard = append(r.XShard, res("xtx-3", 64, 1500, 6, 20))
	r.XShard[1].Errors = map[string]int{"locked by a cross-shard transaction (-1000)": 7}
	r.Reruns = []string{"ZooKeeper create at 1, leader (a call of 6000 ms, 1 requests)"}

	var b bytes.Buffer
	r.WriteMarkdown(&b)
	md := b.String()
	checkReport(t, r, md)
	want := map[string]string{
		"write throughput at 1 client (create, set, multi, leader and follower)": "0.90× (worst: multi at 1, follower)|" + Missed,
		"write throughput at more clients (create, set, multi)":                  "1.20× (worst: set at 16)|" + Missed,
		"ClickHouse's insert sequence":                                           "3.00× (worst: insert at 1, follower)|" + Met,
		"server CPU per write (create, set, multi)":                              "2.00× (worst: multi at 1, follower)|" + Missed,
		"read throughput (get, exists, children, but children at 64 clients)":    "3.00× (worst: get at 1, follower)|" + Met,
		"children throughput at 64 clients":                                      "3.00× (worst: children at 64)|" + Met,
		"p99 latency, every workload":                                            "0.50× (worst: create at 1, follower)|" + Met,
		"RSS per znode at 1,000,000 znodes":                                      "0.33× (210 vs 629 bytes)|" + Met,
		"2-shard transaction p50 / one-shard multi p50, 1 client":                "2.00× (4.00 vs 2.00 ms)|" + Missed,
		"2-shard transaction p99 / one-shard multi p99, 1 client":                "2.00× (10.00 vs 5.00 ms)|" + Missed,
		"cross-shard transactions per second over 2 shards, 64 clients":          "2,500/s|" + Met,
		"cross-shard transactions per second over 3 shards, 64 clients":          "1,500/s|" + Missed,
	}
	require.Len(t, r.Goals(), len(want))
	for _, g := range r.Goals() {
		if w, ok := want[g.Name]; !ok || g.Measured+"|"+g.Verdict != w {
			t.Errorf("goal %q: %s|%s, want %q", g.Name, g.Measured, g.Verdict, w)
		}
	}
	for _, s := range []string{"| set | 16 | 1,200 | 1,000 | 1.20× | 4.00 | 8.00 | 0.50× | 300 | 400 | 0.75× | ≥ 1.5× |",
		"| multi | 1, follower | 900 | 1,000 | 0.90× | 4.00 | 8.00 | 0.50× | 800 | 400 | 2.00× | ≥ 1× |",
		"locked by a cross-shard transaction (-1000)=7", "720 MiB (240 + 240 + 240)",
		"the first having stalled (one request waited more than half the window): ZooKeeper create at 1, leader (a call of 6000 ms, 1 requests)."} {
		if !strings.Contains(md, s) {
			t.Errorf("report has no %q", s)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
}

// TestStalled: a run is measured again when one call, counted or not, took
// more than half the window.
func TestStalled(t *testing.T) {
	assert.False(t, stalled(bench.Result{Max: 40, Longest: 40}, 5*time.Second))
	assert.True(t, stalled(bench.Result{Max: 4, Longest: 6000, Requests: 1}, 5*time.Second), "a call begun in the warm-up")
}

// TestWriteFileKeepsOtherMeasurements checks that a new report replaces
// the old one up to KeptMarker and keeps what follows it.
func TestWriteFileKeepsOtherMeasurements(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	r := &Report{Settings: DefaultSettings(true), Started: time.Now()}
	require.NoError(t, r.WriteFile(path))
	first, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.NotContains(t, string(first), KeptMarker)

	kept := KeptMarker + "\n\n## Load held\n\nfigures of another run\n"
	require.NoError(t, os.WriteFile(path, []byte("# an older report\n\nold figures\n\n"+kept), 0o644))
	require.NoError(t, r.WriteFile(path))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.NotContains(t, string(got), "old figures")
	assert.True(t, strings.HasPrefix(string(got), string(first)), "the new report comes first")
	assert.True(t, strings.HasSuffix(string(got), kept), "the kept part ends the file")
}

func TestSettingsFromEnv(t *testing.T) {
	t.Setenv(EnvDuration, "2s")
	t.Setenv(EnvZnodes, "10000")
	t.Setenv(EnvClients, "1,8")
	s, err := SettingsFromEnv(false)
	require.NoError(t, err)
	if s.Duration != 2*time.Second || s.Znodes != 10000 || len(s.Clients) != 2 || s.Clients[1] != 8 {
		t.Fatalf("settings %+v", s)
	}
	if got, want := s.Command(), "XKEEPER_BENCH_DURATION=2s XKEEPER_BENCH_CLIENTS=1,8 XKEEPER_BENCH_ZNODES=10000 bash bench/compare.sh"; got != want {
		t.Fatalf("command %q, want %q", got, want)
	}
	t.Setenv(EnvClients, "1,x")
	if _, err := SettingsFromEnv(false); err == nil {
		t.Fatal("bad client list accepted")
	}
}

package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// RequireCHDBEnv, when set to 1, makes NewCHDB fail instead of skip the
// test if libchdb (ClickHouse 26 as a shared library) or a C compiler to
// build its runner is missing.
const RequireCHDBEnv = "XKEEPER_REQUIRE_CHDB"

// CHDBLibEnv names a libchdb.so to use instead of the one
// .ci/install-deps.sh caches.
const CHDBLibEnv = "XKEEPER_CHDB_LIB"

// CHDBVersion is the version of the npm package @chdb/lib-linux-x64-gnu
// that .ci/install-deps.sh fetches (ClickHouse 26.7).
const CHDBVersion = "26.7.3-stable.1"

// CHDBLibrary returns the path of libchdb.so: $XKEEPER_CHDB_LIB, or the
// install script's cache, $XDG_CACHE_HOME (~/.cache)/xkeeper/chdb/CHDBVersion.
func CHDBLibrary() (string, error) {
	if p := os.Getenv(CHDBLibEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", CHDBLibEnv, p, err)
		}
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(cache, "xkeeper", "chdb", CHDBVersion, "libchdb.so")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no %s (npm package @chdb/lib-linux-x64-gnu@%s)", p, CHDBVersion)
	}
	return p, nil
}

// chdbrunBinary builds testenv/chdbrun (cgo) once per test binary.
var chdbrunBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "xkeeper-chdbrun-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "chdbrun")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/xkeeper/xkeeper/testenv/chdbrun")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build testenv/chdbrun (cgo, needs a C compiler): %v\n%s", err, out)
	}
	return bin, nil
})

// CHDBOptions shape the clickhouse-local that NewCHDB runs.
type CHDBOptions struct {
	Servers         []string      // the keeper's client addresses, host:port (<zookeeper><node>)
	SessionTimeout  time.Duration // <session_timeout_ms>; default 10 s
	KeeperMapPrefix string        // <keeper_map_path_prefix>; default /keeper_map_tables
	Macros          map[string]string
	ExtraConfig     string // XML elements added inside <clickhouse> as they are
}

// CHDB is ClickHouse 26.7's clickhouse-local, run in-process from libchdb
// by the testenv/chdbrun tool, with a config whose <zookeeper> names a
// keeper. Each Run is one process (one keeper session); the data
// directory lasts as long as the CHDB, so tables a Run creates are
// attached again by the next.
type CHDB struct {
	t      testing.TB
	lib    string
	bin    string
	dir    string
	config string
	runs   int
}

// CHDBStatement is a statement for CHDB.Run. One that fails stops the
// run unless MayFail.
type CHDBStatement struct {
	SQL     string `json:"sql"`
	MayFail bool   `json:"may_fail"`
}

// CHDBResult is a statement's answer: its output (TabSeparated) or
// ClickHouse's error text.
type CHDBResult struct {
	SQL     string
	Output  string
	Error   string
	Elapsed time.Duration
}

// CHDBRun is what one Run took: the whole process, and the part of it
// that was not the statements (loading the library, starting the engine,
// connecting to the keeper, shutting down).
type CHDBRun struct {
	Total, Start time.Duration
}

// NewCHDB writes a clickhouse-local config for the keeper at o.Servers
// into a directory of the test's and returns a CHDB on it. The test is
// skipped if libchdb or a C compiler is missing, unless
// XKEEPER_REQUIRE_CHDB=1.
func NewCHDB(t testing.TB, o CHDBOptions) *CHDB {
	t.Helper()
	lib, err := CHDBLibrary()
	if err != nil {
		skipOrFail(t, RequireCHDBEnv, "ClickHouse 26 (libchdb) unavailable: %v; fetch it with .ci/install-deps.sh", err)
	}
	bin, err := chdbrunBinary()
	if err != nil {
		skipOrFail(t, RequireCHDBEnv, "ClickHouse 26 (libchdb) runner unavailable: %v", err)
	}
	c := &CHDB{t: t, lib: lib, bin: bin, dir: t.TempDir()}
	c.config = filepath.Join(c.dir, "config.xml")
	cfg, err := chdbConfig(c.dir, o)
	if err != nil {
		t.Fatalf("NewCHDB: %v", err)
	}
	if err := os.WriteFile(c.config, cfg, 0o644); err != nil {
		t.Fatalf("NewCHDB: %v", err)
	}
	return c
}

// chdbConfig renders clickhouse-local's config: the keeper, the KeeperMap
// prefix, macros, and a debug log in dir (ClickHouse logs the keeper's
// feature flags at debug level).
func chdbConfig(dir string, o CHDBOptions) ([]byte, error) {
	if len(o.Servers) == 0 {
		return nil, errors.New("no keeper servers")
	}
	esc := func(s string) string {
		var b strings.Builder
		xml.EscapeText(&b, []byte(s))
		return b.String()
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "<clickhouse>\n  <logger><level>debug</level><log>%s</log><errorlog>%s</errorlog><console>0</console></logger>\n",
		esc(filepath.Join(dir, "clickhouse.log")), esc(filepath.Join(dir, "clickhouse.err.log")))
	b.WriteString("  <zookeeper>\n")
	for i, s := range o.Servers {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "    <node index=\"%d\"><host>%s</host><port>%s</port></node>\n", i+1, esc(host), esc(port))
	}
	timeout := o.SessionTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	fmt.Fprintf(&b, "    <session_timeout_ms>%d</session_timeout_ms>\n  </zookeeper>\n", timeout.Milliseconds())
	prefix := o.KeeperMapPrefix
	if prefix == "" {
		prefix = "/keeper_map_tables"
	}
	fmt.Fprintf(&b, "  <keeper_map_path_prefix>%s</keeper_map_path_prefix>\n", esc(prefix))
	if len(o.Macros) > 0 {
		b.WriteString("  <macros>")
		for _, k := range slices.Sorted(maps.Keys(o.Macros)) {
			fmt.Fprintf(&b, "<%s>%s</%s>", k, esc(o.Macros[k]), k)
		}
		b.WriteString("</macros>\n")
	}
	b.WriteString(o.ExtraConfig)
	b.WriteString("</clickhouse>\n")
	return b.Bytes(), nil
}

// Run runs statements in one clickhouse-local process, in order, and
// returns the answers of those that ran. The error names the first
// statement that failed without MayFail, with ClickHouse's error text, or
// the runner's own failure, with the tail of its output.
func (c *CHDB) Run(statements ...CHDBStatement) ([]CHDBResult, CHDBRun, error) {
	c.runs++
	in, err := json.Marshal(statements)
	if err != nil {
		return nil, CHDBRun{}, err
	}
	out := filepath.Join(c.dir, fmt.Sprintf("run%d.jsonl", c.runs))
	logPath := filepath.Join(c.dir, fmt.Sprintf("run%d.log", c.runs))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, CHDBRun{}, err
	}
	defer logFile.Close()
	cmd := exec.Command(c.bin, "-lib", c.lib, "-out", out, "-config", c.config, "-path", filepath.Join(c.dir, "data"))
	cmd.Dir = c.dir
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	began := time.Now()
	runErr := cmd.Run()
	run := CHDBRun{Total: time.Since(began)}
	results, err := readCHDBResults(out, statements)
	run.Start = run.Total
	for _, r := range results {
		run.Start -= r.Elapsed
	}
	if err == nil && runErr != nil {
		err = fmt.Errorf("chdbrun: %v", runErr)
	}
	if err != nil {
		return results, run, fmt.Errorf("%w\nchdbrun output:\n%s\nClickHouse error log:\n%s", err,
			indent(tailFile(logPath, 20)), indent(tailFile(filepath.Join(c.dir, "clickhouse.err.log"), 20)))
	}
	return results, run, nil
}

// readCHDBResults reads the runner's answers; the error is the first
// statement that failed without leave to.
func readCHDBResults(path string, statements []CHDBStatement) ([]CHDBResult, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var results []CHDBResult
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<30)
	for sc.Scan() {
		var line struct {
			Statement int     `json:"statement"`
			Output    string  `json:"output"`
			Error     string  `json:"error"`
			Elapsed   float64 `json:"elapsed"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return results, fmt.Errorf("%s: %v", path, err)
		}
		if line.Statement < 0 || line.Statement >= len(statements) {
			return results, fmt.Errorf("%s: answer to statement %d of %d", path, line.Statement, len(statements))
		}
		s := statements[line.Statement]
		results = append(results, CHDBResult{SQL: s.SQL, Output: line.Output, Error: line.Error,
			Elapsed: time.Duration(line.Elapsed * float64(time.Second))})
		if line.Error != "" && !s.MayFail {
			return results, fmt.Errorf("ClickHouse 26: statement %d, %s: %s", line.Statement, s.SQL, line.Error)
		}
	}
	return results, sc.Err()
}

// Log returns ClickHouse's log (debug level) of every run so far.
func (c *CHDB) Log() string {
	data, _ := os.ReadFile(filepath.Join(c.dir, "clickhouse.log"))
	return string(data)
}

var chdbFlagLine = regexp.MustCompile(`Keeper feature flag (\w+): (enabled|disabled)`)

// FeatureFlags returns the keeper feature flags ClickHouse logged the
// last time it connected to the keeper (ZooKeeperClient: "Keeper feature
// flag NAME: enabled"), by name; nil if it logged none.
func (c *CHDB) FeatureFlags() map[string]bool {
	var flags map[string]bool
	for _, m := range chdbFlagLine.FindAllStringSubmatch(c.Log(), -1) {
		if flags == nil || m[1] == "FILTERED_LIST" { // the first flag of each connection's list
			flags = map[string]bool{}
		}
		flags[m[1]] = m[2] == "enabled"
	}
	return flags
}

package compare

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/xkeeper/xkeeper/testenv"
)

// Machine describes where a run happened.
type Machine struct {
	CPU       string // model name from /proc/cpuinfo
	Cores     int
	Memory    string // MemTotal
	Kernel    string
	OS        string
	Go        string
	XKeeper   string // commit of the work tree
	ZooKeeper string // version line of srvr
	Java      string // first line of java -version
	JVMFlags  string
	Disk      string // file system of the servers' data directories
	Load      string // /proc/loadavg when the run started
}

// CollectMachine reads the machine's description from /proc and the
// tools; dataDir is where the servers keep their data. What cannot be
// read is left "unknown".
func CollectMachine(dataDir string) Machine {
	m := Machine{
		CPU:     procField("/proc/cpuinfo", "model name"),
		Cores:   runtime.NumCPU(),
		Memory:  memTotal(),
		Kernel:  "Linux " + firstLine(readFile("/proc/sys/kernel/osrelease")),
		OS:      strings.Trim(procField("/etc/os-release", "PRETTY_NAME"), `"`),
		Go:      runtime.Version(),
		XKeeper: commit(),
		Disk:    filesystem(dataDir),
		Load:    loadAverage(),
	}
	return m
}

// setZooKeeper records the version, Java and JVM flags of a running
// ensemble.
func (m *Machine) setZooKeeper(z *testenv.ZooKeeper) {
	if out, err := fourLetter(z.Servers()[0], "srvr"); err == nil {
		m.ZooKeeper = strings.TrimPrefix(firstLine(out), "Zookeeper version: ")
	}
	if out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", "libzookeeper-java").Output(); err == nil {
		m.ZooKeeper += " (Debian libzookeeper-java " + strings.TrimSpace(string(out)) + ")"
	}
	if out, err := exec.Command(z.Java(), "-version").CombinedOutput(); err == nil {
		m.Java = firstLine(string(out))
	}
	m.JVMFlags = strings.Join(z.JVMFlags(), " ")
}

// loadAverage is the 1, 5 and 15 minute load averages.
func loadAverage() string {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

// procField returns the value of the first "key: value" or "key=value"
// line of a file.
func procField(path, key string) string {
	for line := range strings.Lines(readFile(path)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.Contains(k, "=") {
			k, v, ok = strings.Cut(line, "=")
		}
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func memTotal() string {
	f := strings.Fields(procField("/proc/meminfo", "MemTotal"))
	if len(f) == 0 {
		return "unknown"
	}
	kb, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "unknown"
	}
	return fmt.Sprintf("%.1f GiB", kb/(1<<20))
}

// commit names the work tree's commit, marked when it has changes.
func commit() string {
	dir := repoRoot()
	out, err := exec.Command("git", "-C", dir, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += " with uncommitted changes"
	}
	return c
}

// repoRoot is the repository root, two levels above this package's
// directory where go test runs.
func repoRoot() string {
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "."
	}
	return dir
}

// filesystem names the mount that holds dir and its type, from
// /proc/self/mountinfo.
func filesystem(dir string) string {
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "unknown"
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	best, desc := "", "unknown"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 2 {
			continue
		}
		mp := fields[4]
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best, desc = mp, fmt.Sprintf("%s (%s on %s, mounted at %s)", dir, tail[0], tail[1], mp)
		}
	}
	return desc
}

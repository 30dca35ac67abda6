package testenv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RequireZooKeeperEnv, when set to 1, makes StartZooKeeper fail instead of
// skip the test if Java or Debian's zookeeper package is missing.
const RequireZooKeeperEnv = "XKEEPER_REQUIRE_ZOOKEEPER"

// zkStartTimeout bounds how long a member or ensemble may take to be ready.
const zkStartTimeout = 90 * time.Second

// zkDefaultHeap is each member's JVM -Xmx unless ZooKeeperOptions says
// otherwise.
const zkDefaultHeap = "512m"

// zkJVMFlags keep each JVM small on a 2-core CI box without hobbling the JIT,
// so that benchmarks against ZooKeeper stay fair; -Xmx comes from
// ZooKeeperOptions.MaxHeap.
var zkJVMFlags = []string{
	"-Xms64m",
	"-XX:+UseSerialGC",
	"-XX:+ExitOnOutOfMemoryError",
	"-XX:-UsePerfData", // no hsperfdata files in /tmp
	"-Djava.net.preferIPv4Stack=true",
	"-Dzookeeper.jmx.log4j.disable=true",
	"-Dorg.slf4j.simpleLogger.showDateTime=true",
	"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
}

// ZooKeeper is an Apache ZooKeeper standalone server or ensemble on loopback
// started by StartZooKeeper. Its methods must be called from the test
// goroutine.
type ZooKeeper struct {
	t       testing.TB
	java    string
	cp      string
	flags   []string // JVM flags of every member
	members []*zkMember
}

// ZooKeeperOptions shape a ZooKeeper started by StartZooKeeperWith.
type ZooKeeperOptions struct {
	Members int    // 1 for a standalone server; default 1
	MaxHeap string // each member's JVM -Xmx, such as "2g" for a million znodes; default "512m"
	// Config holds extra zoo.cfg lines, such as "snapCount=20" (a key
	// zoo.cfg does not know becomes the system property zookeeper.KEY).
	Config string
	// JVMFlags are added to each member's JVM flags, such as
	// "-Dznode.container.checkIntervalMs=3600000" (a system property
	// ZooKeeper reads without the zookeeper. prefix).
	JVMFlags []string
}

type zkMember struct {
	id         int // myid, 1-based
	clientPort int
	dir        string
	cfgPath    string
	logPath    string

	mu   sync.Mutex
	proc *Process
}

// StartZooKeeper starts a ZooKeeper 3.8 standalone server (members == 1) or
// an ensemble of members servers on 127.0.0.1 and waits until every member
// answers ruok and the ensemble has a leader. The servers are stopped when
// the test ends. The test is skipped if Java or ZooKeeper is not installed,
// unless XKEEPER_REQUIRE_ZOOKEEPER=1.
func StartZooKeeper(t testing.TB, members int) *ZooKeeper {
	t.Helper()
	if members < 1 {
		t.Fatalf("StartZooKeeper: members = %d, want >= 1", members)
	}
	return StartZooKeeperWith(t, ZooKeeperOptions{Members: members})
}

// StartZooKeeperWith is StartZooKeeper with options.
func StartZooKeeperWith(t testing.TB, o ZooKeeperOptions) *ZooKeeper {
	t.Helper()
	members := max(o.Members, 1)
	heap := cmp.Or(o.MaxHeap, zkDefaultHeap)
	java, cp, err := zooKeeperCommand()
	if err != nil {
		skipOrFail(t, RequireZooKeeperEnv, "ZooKeeper unavailable: %v; install it with .ci/install-deps.sh", err)
	}
	z := &ZooKeeper{t: t, java: java, cp: cp, flags: slices.Concat([]string{"-Xmx" + heap}, zkJVMFlags, o.JVMFlags)}
	root := t.TempDir()
	ports := FreePorts(t, 3*members) // client, quorum, election per member
	var quorum strings.Builder
	if members > 1 {
		for i := range members {
			fmt.Fprintf(&quorum, "server.%d=127.0.0.1:%d:%d\n", i+1, ports[3*i+1], ports[3*i+2])
		}
	}
	for i := range members {
		m := &zkMember{id: i + 1, clientPort: ports[3*i], dir: filepath.Join(root, fmt.Sprintf("zk%d", i+1))}
		m.cfgPath = filepath.Join(m.dir, "zoo.cfg")
		m.logPath = filepath.Join(m.dir, "zookeeper.log")
		if err := m.writeConfig(quorum.String() + o.Config); err != nil {
			t.Fatalf("StartZooKeeper: %v", err)
		}
		z.members = append(z.members, m)
	}
	for i := range z.members {
		z.start(i)
	}
	z.waitReady()
	t.Cleanup(z.Stop)
	return z
}

// zooKeeperCommand finds java and the classpath of Debian's ZooKeeper:
// libzookeeper-java installs /usr/share/java/zookeeper.jar, whose manifest
// Class-Path lists its dependencies; slf4j-simple makes it log to stderr.
func zooKeeperCommand() (java, classpath string, err error) {
	java = ""
	if home := os.Getenv("JAVA_HOME"); home != "" {
		java = firstExisting(filepath.Join(home, "bin", "java"))
	}
	if java == "" {
		if java, err = exec.LookPath("java"); err != nil {
			return "", "", fmt.Errorf("no java on PATH (Debian package default-jre-headless)")
		}
	}
	jar := firstExisting("/usr/share/java/zookeeper.jar")
	if jar == "" {
		return "", "", fmt.Errorf("no /usr/share/java/zookeeper.jar (Debian package libzookeeper-java)")
	}
	classpath = jar
	if logger := firstExisting("/usr/share/java/slf4j-simple.jar"); logger != "" {
		classpath += ":" + logger
	}
	return java, classpath, nil
}

func (m *zkMember) dataDir() string { return filepath.Join(m.dir, "data") }

func (m *zkMember) writeConfig(extra string) error {
	dataDir := m.dataDir()
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dataDir, "myid"), []byte(strconv.Itoa(m.id)+"\n"), 0o644); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`tickTime=2000
initLimit=10
syncLimit=5
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
4lw.commands.whitelist=*
admin.enableServer=false
%s
`, dataDir, m.clientPort, extra)
	return os.WriteFile(m.cfgPath, []byte(cfg), 0o644)
}

// start launches member i; it does not wait for it.
func (z *ZooKeeper) start(i int) {
	z.t.Helper()
	m := z.members[i]
	args := append(slices.Clone(z.flags),
		"-cp", z.cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", m.cfgPath)
	cmd := exec.Command(z.java, args...)
	cmd.Dir = m.dir
	p, err := StartProcess(z.t, cmd, m.logPath)
	if err != nil {
		z.t.Fatalf("ZooKeeper member %d: %v", i, err)
	}
	m.mu.Lock()
	m.proc = p
	m.mu.Unlock()
}

func (m *zkMember) process() *Process {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc
}

func (m *zkMember) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.clientPort)) }

// waitReady waits until every member answers ruok with imok and reports a
// serving mode, with exactly one leader in an ensemble.
func (z *ZooKeeper) waitReady() {
	z.t.Helper()
	start := time.Now()
	for i, m := range z.members {
		err := m.process().WaitReady(zkStartTimeout, func(ctx context.Context) error {
			mode, err := zkMode(ctx, m.addr())
			if err != nil {
				return err
			}
			if len(z.members) == 1 && mode != "standalone" || len(z.members) > 1 && mode != "leader" && mode != "follower" {
				return fmt.Errorf("mode %q", mode)
			}
			if len(z.members) > 1 && z.Leader() < 0 {
				return errors.New("no leader yet")
			}
			return nil
		})
		if err != nil {
			z.t.Fatalf("ZooKeeper member %d (%s): %v\nlog tail:\n%s", i, m.addr(), err, indent(z.LogTail(i)))
		}
	}
	z.t.Logf("ZooKeeper %d member(s) ready at %s in %v", len(z.members), z.ConnectString(), time.Since(start).Round(time.Millisecond))
}

// zkMode checks that the server at addr answers ruok and returns the Mode
// line of its srvr output: standalone, leader or follower.
func zkMode(ctx context.Context, addr string) (string, error) {
	if out, err := FourLetterWord(ctx, addr, "ruok"); err != nil {
		return "", err
	} else if out != "imok" {
		return "", fmt.Errorf("ruok answered %q", out)
	}
	out, err := FourLetterWord(ctx, addr, "srvr")
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(out) {
		if mode, ok := strings.CutPrefix(strings.TrimSpace(line), "Mode: "); ok {
			return mode, nil
		}
	}
	return "", fmt.Errorf("srvr answered %q", strings.TrimSpace(out))
}

// FourLetterWord sends a four-letter command such as ruok, srvr or mntr to
// the ZooKeeper-protocol server at addr and returns its whole answer.
func FourLetterWord(ctx context.Context, addr, cmd string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	} else {
		conn.SetDeadline(time.Now().Add(10 * time.Second))
	}
	if _, err := io.WriteString(conn, cmd); err != nil {
		return "", fmt.Errorf("%s %s: %w", addr, cmd, err)
	}
	out, err := io.ReadAll(conn)
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w", addr, cmd, err)
	}
	return string(out), nil
}

// Servers returns the members' client addresses as host:port.
func (z *ZooKeeper) Servers() []string {
	addrs := make([]string, len(z.members))
	for i, m := range z.members {
		addrs[i] = m.addr()
	}
	return addrs
}

// JVMFlags returns the flags every member's JVM runs with.
func (z *ZooKeeper) JVMFlags() []string { return slices.Clone(z.flags) }

// Java returns the java binary the members run on.
func (z *ZooKeeper) Java() string { return z.java }

// ConnectString returns the members' client addresses joined by commas.
func (z *ZooKeeper) ConnectString() string { return strings.Join(z.Servers(), ",") }

// PID returns the process id of member i's JVM.
func (z *ZooKeeper) PID(i int) int { return z.members[i].process().PID() }

// Leader returns the index of the member that reports Mode: leader, or -1.
func (z *ZooKeeper) Leader() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for i, m := range z.members {
		if mode, err := zkMode(ctx, m.addr()); err == nil && mode == "leader" {
			return i
		}
	}
	return -1
}

// Kill sends SIGKILL to member i and waits for it to exit.
func (z *ZooKeeper) Kill(i int) { z.members[i].process().Kill() }

// Restart stops member i if it is running (SIGTERM), starts it again with the
// same ports and data, and waits until the ensemble is ready again.
func (z *ZooKeeper) Restart(i int) {
	z.t.Helper()
	z.members[i].process().Stop(10 * time.Second)
	z.start(i)
	z.waitReady()
}

// StartAll starts every member that is not running, all at once, with
// their ports and data, and waits until the ensemble is ready (after Kill
// of each, a whole ensemble's restart).
func (z *ZooKeeper) StartAll() {
	z.t.Helper()
	for i, m := range z.members {
		select {
		case <-m.process().Done():
			z.start(i)
		default:
		}
	}
	z.waitReady()
}

// Stop stops every member (SIGTERM, then SIGKILL after a grace period) and
// waits for them. It is called when the test ends.
func (z *ZooKeeper) Stop() {
	var wg sync.WaitGroup
	for _, m := range z.members {
		wg.Go(func() { m.process().Stop(10 * time.Second) })
	}
	wg.Wait()
}

// DataDir returns member i's dataDir (snapshots and transaction logs are
// in its version-2).
func (z *ZooKeeper) DataDir(i int) string { return z.members[i].dataDir() }

// LogTail returns the last lines of member i's log, for failure messages.
func (z *ZooKeeper) LogTail(i int) string { return tailFile(z.members[i].logPath, 40) }

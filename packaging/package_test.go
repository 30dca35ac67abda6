package packaging

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/xkeeper/xkeeper/bench"
	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/testenv"
)

const (
	testVersion = "9.9.9~test"
	unitFile    = "/lib/systemd/system/xkeeper@.service"
	clusterFile = "/etc/xkeeper/cluster.yaml"
	secretFile  = "/etc/default/xkeeper"
	stateDir    = "/var/lib/xkeeper"
	member      = "a1"
	unit        = "xkeeper@" + member + ".service"
	// The member's ports: its own network namespace has nothing else.
	clientAddr = "127.0.0.1:2181"
	raftAddr   = "127.0.0.1:2281"
	httpAddr   = "127.0.0.1:2381"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// hostPaths are what installing the package makes on a machine: the host
// running the test must still be without them, or have them as they were.
var hostPaths = []string{"/usr/bin/xkeeper", unitFile, "/etc/xkeeper", secretFile, stateDir, "/var/lib/dpkg/info/xkeeper.list"}

// TestDebianPackage builds the package and installs it on a systemd booted
// for the test in namespaces of its own (testenv.BootSystemd: the host's
// files stay as they were), checks what it installed, starts the unit
// with systemctl and checks that it runs as its user under its hardening
// and serves, stops it, restores a backup as root that the unit then
// serves, and removes the package while the member runs (which must stop
// it) and purges it. It builds the package with nfpm (fetched with go
// install), so it runs only with XKEEPER_PACKAGE_TEST=1, as root (CI sets
// it); where systemd cannot boot it skips, or fails with
// XKEEPER_REQUIRE_SYSTEMD=1.
func TestDebianPackage(t *testing.T) {
	if os.Getenv("XKEEPER_PACKAGE_TEST") != "1" {
		t.Skip("builds the Debian package and boots systemd: set XKEEPER_PACKAGE_TEST=1 (as root) to run it")
	}
	require.Zero(t, os.Geteuid(), "dpkg and systemd need root")
	hostBefore := hostState()
	sd := testenv.BootSystemd(t) // first: where it cannot boot, nothing is built
	out := run(t, "bash", "../scripts/build-deb.sh", testVersion)
	deb := filepath.Join("..", strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]))
	require.FileExists(t, deb)

	p := install(t, sd, deb)
	assert.Equal(t, hostBefore, hostState(), "installing in systemd's namespaces leaves the host as it was")
	saved := p.serve(t)
	p.restoreAsRoot(t, saved)
	p.remove(t)
	assert.Equal(t, hostBefore, hostState(), "the host is as it was")
}

// run runs a command on the host and returns its combined output,
// failing the test on a non-zero exit.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, out)
	return string(out)
}

// hostState describes hostPaths and the xkeeper user on this host.
func hostState() string {
	var b strings.Builder
	for _, path := range hostPaths {
		if fi, err := os.Lstat(path); err == nil {
			fmt.Fprintf(&b, "%s %v %v\n", path, fi.Mode(), fi.ModTime())
		} else {
			fmt.Fprintf(&b, "%s absent\n", path)
		}
	}
	user, _ := exec.Command("getent", "passwd", "xkeeper").Output()
	fmt.Fprintf(&b, "user %s", user)
	return b.String()
}

// packaged is the package installed in a booted systemd's namespaces.
type packaged struct {
	sd       *testenv.Systemd
	uid, gid string // the package's user
	secret   string // the cluster secret, in secretFile as README says
}

// install installs deb with dpkg in sd's namespaces and checks what it
// installed: the program, its user, the cluster file, a unit that
// verifies.
func install(t *testing.T, sd *testenv.Systemd, deb string) *packaged {
	data, err := os.ReadFile(deb)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(sd.Path("/tmp/xkeeper.deb"), data, 0o644))
	sd.Run("dpkg", "-i", "/tmp/xkeeper.deb")

	var v struct{ Version, Go string }
	require.NoError(t, json.Unmarshal([]byte(sd.Run("/usr/bin/xkeeper", "version", "--format", "json")), &v))
	assert.Equal(t, testVersion, v.Version)
	p := &packaged{sd: sd, uid: strings.TrimSpace(sd.Run("id", "-u", "xkeeper")), gid: strings.TrimSpace(sd.Run("id", "-g", "xkeeper"))}
	st, err := os.Stat(sd.Path(clusterFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), st.Mode().Perm())
	assert.Equal(t, p.gid, fmt.Sprint(st.Sys().(*syscall.Stat_t).Gid), "the cluster file is the xkeeper group's")
	sd.Run("/usr/bin/xkeeper", "config", "check", "--config", clusterFile)
	assert.Empty(t, strings.TrimSpace(sd.Run("systemd-analyze", "verify", unitFile)), "the unit verifies cleanly")
	return p
}

// writeCluster makes the cluster file a one-member shard whose data
// directories are under data, as an operator would edit it (its secret in
// secretFile, root's only).
func (p *packaged) writeCluster(t *testing.T, data string) {
	c, err := config.Layout(data, 1, 1, []int{2181, 2281}, config.Default())
	require.NoError(t, err)
	m := &c.Shards[0].Members[0]
	require.Equal(t, member, m.ID)
	require.Equal(t, [2]string{clientAddr, raftAddr}, [2]string{m.ClientAddr, m.RaftAddr})
	m.HTTPAddr = httpAddr
	p.secret, c.Security.ClusterSecret = c.Security.ClusterSecret, ""
	require.NoError(t, c.Write(p.sd.Path(clusterFile)))
	p.sd.Run("chgrp", "xkeeper", clusterFile)
	p.sd.Run("chmod", "0640", clusterFile)
	require.NoError(t, os.WriteFile(p.sd.Path(secretFile), []byte("XKEEPER_SECURITY_CLUSTER_SECRET="+p.secret+"\n"), 0o600))
}

// xkeeperAsRoot runs the packaged xkeeper as root, with the cluster file
// and its secret, as an operator after `. /etc/default/xkeeper`.
func (p *packaged) xkeeperAsRoot(t *testing.T, args ...string) string {
	cmd := p.sd.Command("/usr/bin/xkeeper", slices.Concat(args, []string{"--config", clusterFile})...)
	cmd.Env = append(os.Environ(), "XKEEPER_SECURITY_CLUSTER_SECRET="+p.secret)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "xkeeper %v as root: %s", args, out)
	return string(out)
}

// serve runs the member under systemd: the first start of a new shard as
// README says, then systemctl start; it must run as the package's user
// under the unit's hardening, take a write and a read, and stop cleanly
// with systemctl stop. It returns the path of a backup saved meanwhile.
func (p *packaged) serve(t *testing.T) (saved string) {
	p.writeCluster(t, stateDir)
	p.sd.Run("setpriv", "--reuid="+p.uid, "--regid="+p.gid, "--init-groups",
		"/usr/bin/xkeeper", "bootstrap", "--config", clusterFile, "--member", member)
	pid := p.start(t)
	p.assertHardened(t, pid)

	conn := p.connect(t)
	_, err := conn.Create("/saved", []byte("before the backup"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	got, _, err := conn.Get("/saved")
	require.NoError(t, err)
	assert.Equal(t, "before the backup", string(got))
	conn.Close()
	saved = "/var/backups/xkeeper-test"
	p.xkeeperAsRoot(t, "snapshot", "save", "--shard", "a", saved)

	p.sd.Run("systemctl", "stop", unit)
	// A non-zero exit fails the unit, a stop past TimeoutStopSec ends in
	// SIGKILL and Result=timeout.
	assert.Equal(t, map[string]string{"ActiveState": "inactive", "Result": "success"}, p.sd.Show(unit, "ActiveState", "Result"),
		"systemctl stop: a clean exit\n%s", p.journal())
	// journald may store the member's last lines after systemctl returns.
	assert.Eventually(t, func() bool { return strings.Contains(p.journal(), `msg="shutting down"`) },
		10*time.Second, 50*time.Millisecond, "the member stops itself on SIGTERM")
	assert.NoDirExists(t, p.sd.Path(fmt.Sprintf("/proc/%d", pid)), "the member's process is gone")
	return saved
}

// start starts the unit with systemctl, waits until the member is ready
// and returns its main PID (in systemd's PID namespace).
func (p *packaged) start(t *testing.T) int {
	p.sd.Run("systemctl", "start", unit)
	client := p.sd.HTTPClient()
	ready := func() bool {
		resp, err := client.Get("http://" + httpAddr + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	deadline := time.Now().Add(30 * time.Second)
	for !ready() {
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready 30 s after systemctl start:\n%s", unit, p.journal())
		}
		time.Sleep(50 * time.Millisecond)
	}
	show := p.sd.Show(unit, "ActiveState", "MainPID")
	require.Equal(t, "active", show["ActiveState"], p.journal())
	pid, err := strconv.Atoi(show["MainPID"])
	require.NoError(t, err)
	require.NotZero(t, pid)
	return pid
}

// journal is the unit's last journal lines, for failure messages.
func (p *packaged) journal() string {
	out, _ := p.sd.Command("journalctl", "--no-pager", "--lines=30", "--unit="+unit).CombinedOutput()
	return string(out)
}

// connect opens a ZooKeeper session with the member, in systemd's network.
func (p *packaged) connect(t *testing.T) *zk.Conn {
	conn, err := bench.ConnectDialing([]string{clientAddr}, p.sd.Dial)
	require.NoError(t, err)
	return conn
}

// assertHardened checks that the member, process pid, runs as the
// package's user without privileges, under the unit's hardening as
// systemd reports it, and that it cannot write outside the state
// directory even where its user may.
func (p *packaged) assertHardened(t *testing.T, pid int) {
	status, err := os.ReadFile(p.sd.Path(fmt.Sprintf("/proc/%d/status", pid)))
	require.NoError(t, err)
	fields := map[string]string{}
	for line := range strings.SplitSeq(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	want := func(id string) string { return strings.Repeat(id+" ", 3) + id }
	assert.Equal(t, map[string]string{
		"Uid": want(p.uid), "Gid": want(p.gid), // real, effective, saved, file system
		"NoNewPrivs": "1", "CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapBnd": "0000000000000000",
		"Seccomp": "2", // a system call filter
	}, map[string]string{
		"Uid": fields["Uid"], "Gid": fields["Gid"], "NoNewPrivs": fields["NoNewPrivs"], "CapEff": fields["CapEff"],
		"CapPrm": fields["CapPrm"], "CapBnd": fields["CapBnd"], "Seccomp": fields["Seccomp"],
	}, "the member's process, from /proc/%d/status", pid)

	hardening := map[string]string{
		"User": "xkeeper", "Group": "xkeeper", "NoNewPrivileges": "yes", "CapabilityBoundingSet": "", "AmbientCapabilities": "",
		"ProtectSystem": "strict", "ReadWritePaths": stateDir, "ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "yes",
		"ProtectKernelTunables": "yes", "ProtectKernelModules": "yes", "ProtectKernelLogs": "yes", "ProtectControlGroups": "yes",
		"ProtectClock": "yes", "ProtectHostname": "yes", "ProtectProc": "invisible", "RestrictNamespaces": "yes",
		"RestrictRealtime": "yes", "RestrictSUIDSGID": "yes", "LockPersonality": "yes", "MemoryDenyWriteExecute": "yes",
		"UMask": "0027", "StateDirectory": "xkeeper", "LimitNOFILE": "65536",
	}
	assert.Equal(t, hardening, p.sd.Show(unit, slices.Collect(maps.Keys(hardening))...), "the unit's hardening, as systemd runs it")
	show := p.sd.Show(unit, "RestrictAddressFamilies", "SystemCallFilter")
	assert.ElementsMatch(t, []string{"AF_INET", "AF_INET6", "AF_UNIX"}, strings.Fields(show["RestrictAddressFamilies"]))
	calls := strings.Fields(show["SystemCallFilter"])
	assert.Contains(t, calls, "openat", "@system-service is allowed")
	for _, call := range []string{"mount", "chroot", "setuid", "setrlimit", "reboot"} {
		assert.NotContains(t, calls, call, "@privileged, @resources and the rest are not")
	}

	// A directory of the package's user outside the state directory: the
	// user writes it, the member's mount namespace does not let it.
	const elsewhere = "/var/cache/xkeeper-probe"
	p.sd.Run("install", "-d", "-o", "xkeeper", "-g", "xkeeper", elsewhere)
	touch := []string{"--reuid=" + p.uid, "--regid=" + p.gid, "--clear-groups", "touch"}
	p.sd.Run("setpriv", slices.Concat(touch, []string{elsewhere + "/outside-the-unit"})...)
	inUnit := slices.Concat([]string{"--target", strconv.Itoa(pid), "--mount", "--", "setpriv"}, touch)
	out, err := p.sd.Command("nsenter", slices.Concat(inUnit, []string{elsewhere + "/in-the-unit"})...).CombinedOutput()
	assert.Error(t, err, "the member cannot write %s", elsewhere)
	assert.Contains(t, string(out), "Read-only file system")
	p.sd.Run("nsenter", slices.Concat(inUnit, []string{stateDir + "/in-the-unit"})...)
	p.sd.Run("rm", stateDir+"/in-the-unit")
}

// restoreAsRoot restores the backup saved as root (sudo xkeeper snapshot
// restore, as README says) into a new data directory under the state
// directory, which the restore makes: everything it makes must be the
// package user's, and the unit must serve the restored tree and take
// writes.
func (p *packaged) restoreAsRoot(t *testing.T, saved string) {
	data := stateDir + "/restored"
	p.writeCluster(t, data)
	t.Logf("restore as root: %s", p.xkeeperAsRoot(t, "snapshot", "restore", saved))
	uid, err := strconv.ParseUint(p.uid, 10, 32)
	require.NoError(t, err)
	gid, err := strconv.ParseUint(p.gid, 10, 32)
	require.NoError(t, err)
	entries := testenv.AssertOwnedBy(t, p.sd.Path(data), uint32(uid), uint32(gid))
	assert.Greater(t, entries, 2, "the restore made the member's directory and files")

	p.start(t)
	conn := p.connect(t)
	defer conn.Close()
	got, _, err := conn.Get("/saved")
	require.NoError(t, err, "the restored member serves the backup's tree")
	assert.Equal(t, "before the backup", string(got))
	_, err = conn.Create("/after-restore", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err, "the restored member, run by the unit as its user, writes its directory")
}

// remove removes the package while the member runs: the member must be
// stopped and the program and unit gone, the cluster file and data kept;
// then purges it, which removes the cluster file and the user.
func (p *packaged) remove(t *testing.T) {
	pid, err := strconv.Atoi(p.sd.Show(unit, "MainPID")["MainPID"])
	require.NoError(t, err)
	require.NotZero(t, pid, "the member runs before dpkg -r")
	p.sd.Run("dpkg", "-r", "xkeeper")
	assert.NoDirExists(t, p.sd.Path(fmt.Sprintf("/proc/%d", pid)), "dpkg -r stops the running member")
	assert.Equal(t, "inactive", p.sd.Show(unit, "ActiveState")["ActiveState"])
	assert.NoFileExists(t, p.sd.Path("/usr/bin/xkeeper"))
	assert.NoFileExists(t, p.sd.Path(unitFile))
	assert.FileExists(t, p.sd.Path(clusterFile), "dpkg -r keeps the configuration")

	p.sd.Run("dpkg", "--purge", "xkeeper")
	assert.NoFileExists(t, p.sd.Path(clusterFile))
	assert.DirExists(t, p.sd.Path(stateDir+"/restored/"+member), "purge keeps the data")
	out, err := p.sd.Command("id", "xkeeper").CombinedOutput()
	assert.Error(t, err, "purge removes the user: %s", out)
}

package packaging

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/bench"
	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/testenv"
)

const (
	testVersion = "9.9.9~test"
	unitFile    = "/lib/systemd/system/xkeeper@.service"
)

// run runs a command and returns its combined output, failing the test
// on a non-zero exit.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, out)
	return string(out)
}

// unitValues returns the values of key in the unit's [Service] section.
func unitValues(t *testing.T, key string) []string {
	f, err := os.Open(unitFile)
	require.NoError(t, err)
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

// TestDebianPackage builds the package, installs it, checks what it
// installed, runs a member the way the unit does (as its user, from its
// ExecStart: no systemd runs as PID 1 here), restores a backup of it as
// root and serves that the same way, and removes and purges it. It changes the machine, so it runs
// only with XKEEPER_PACKAGE_TEST=1, as root (CI sets it).
func TestDebianPackage(t *testing.T) {
	if os.Getenv("XKEEPER_PACKAGE_TEST") != "1" {
		t.Skip("installs a Debian package on this machine: set XKEEPER_PACKAGE_TEST=1 (as root) to run it")
	}
	require.Zero(t, os.Geteuid(), "dpkg needs root")
	out := run(t, "bash", "../scripts/build-deb.sh", testVersion)
	deb := filepath.Join("..", strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]))
	require.FileExists(t, deb)
	t.Cleanup(func() { exec.Command("dpkg", "--purge", "xkeeper").Run() })
	run(t, "dpkg", "-i", deb)

	var v struct{ Version, Go string }
	require.NoError(t, json.Unmarshal([]byte(run(t, "/usr/bin/xkeeper", "version", "--format", "json")), &v))
	assert.Equal(t, testVersion, v.Version)
	u, err := user.Lookup("xkeeper")
	require.NoError(t, err, "the package creates the xkeeper user")
	st, err := os.Stat("/etc/xkeeper/cluster.yaml")
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), st.Mode().Perm())
	assert.Equal(t, u.Gid, fmt.Sprint(st.Sys().(*syscall.Stat_t).Gid), "the cluster file is the xkeeper group's")
	run(t, "/usr/bin/xkeeper", "config", "check", "--config", "/etc/xkeeper/cluster.yaml")
	assert.Empty(t, strings.TrimSpace(run(t, "systemd-analyze", "verify", unitFile)), "the unit verifies cleanly")

	member(t, u)

	run(t, "dpkg", "-r", "xkeeper")
	assert.NoFileExists(t, "/usr/bin/xkeeper")
	assert.NoFileExists(t, unitFile)
	assert.FileExists(t, "/etc/xkeeper/cluster.yaml", "dpkg -r keeps the configuration")
	run(t, "dpkg", "--purge", "xkeeper")
	assert.NoFileExists(t, "/etc/xkeeper/cluster.yaml")
	_, err = user.Lookup("xkeeper")
	assert.Error(t, err, "purge removes the user")
}

// member starts a one-member shard as the unit would start member m1 (no
// systemd runs as PID 1 here to start the unit itself): its directory
// marked for the shard's first start (xkeeper bootstrap), then as the
// unit's user, with its environment and ExecStart, a data directory under
// /var/lib/xkeeper; it must become ready, take a write, and stop cleanly
// on SIGTERM. Then restored brings the shard back from a backup of it.
func member(t *testing.T, u *user.User) {
	dir, err := os.MkdirTemp("/var/lib/xkeeper", "pkgtest-")
	require.NoError(t, err)
	defer os.RemoveAll(dir)
	c, file := layout(t, dir, dir)
	run(t, "chown", "-R", "xkeeper:xkeeper", dir)

	require.Equal(t, []string{"xkeeper"}, unitValues(t, "User"))
	// The first start of a new shard, as README says: mark the member's
	// empty directory as the unit's user, then start the unit's command.
	id := c.Shards[0].Members[0].ID
	asUser(t, u, "/usr/bin/xkeeper", "bootstrap", "--config", file, "--member", id)
	stop := startUnit(t, u, c, file)
	conn := connect(t, c)
	_, err = conn.Create("/saved", []byte("before the backup"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	conn.Close()
	saved := filepath.Join(dir, "backup")
	run(t, "/usr/bin/xkeeper", "snapshot", "save", "--config", file, "--shard", c.Shards[0].Name, saved)
	stop()

	restored(t, u, saved)
}

// restored restores the backup saved as root (sudo xkeeper snapshot
// restore, as README says) into a new data directory under
// /var/lib/xkeeper, which the restore makes: everything it makes must be
// the unit's user's, and the unit's command, run as that user, must serve
// the restored tree and take writes.
func restored(t *testing.T, u *user.User, saved string) {
	cfgDir, err := os.MkdirTemp("/var/lib/xkeeper", "pkgtest-restore-config-")
	require.NoError(t, err)
	defer os.RemoveAll(cfgDir)
	data := filepath.Join("/var/lib/xkeeper", filepath.Base(cfgDir)+"-data") // not there yet: the restore makes it
	defer os.RemoveAll(data)
	c, file := layout(t, cfgDir, data)
	run(t, "chown", "-R", "xkeeper:xkeeper", cfgDir)

	out := run(t, "/usr/bin/xkeeper", "snapshot", "restore", "--config", file, saved)
	t.Logf("restore as root: %s", out)
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	require.NoError(t, err)
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	require.NoError(t, err)
	entries := testenv.AssertOwnedBy(t, data, uint32(uid), uint32(gid))
	assert.Greater(t, entries, 2, "the restore made the member's directory and files")

	stop := startUnit(t, u, c, file)
	defer stop()
	conn := connect(t, c)
	defer conn.Close()
	got, _, err := conn.Get("/saved")
	require.NoError(t, err, "the restored member serves the backup's tree")
	assert.Equal(t, "before the backup", string(got))
	_, err = conn.Create("/after-restore", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err, "the restored member, run as the unit's user, writes its directory")
}

// layout writes, into dir, the cluster file of a one-member shard whose
// data directories are under data, on free ports with an HTTP port for
// readiness.
func layout(t *testing.T, dir, data string) (*config.Cluster, string) {
	ports := testenv.FreePorts(t, 3)
	c, err := config.Layout(data, 1, 1, ports[:2], config.Default())
	require.NoError(t, err)
	c.Shards[0].Members[0].HTTPAddr = fmt.Sprintf("127.0.0.1:%d", ports[2])
	file := filepath.Join(dir, "cluster.yaml")
	require.NoError(t, c.Write(file))
	return c, file
}

// asUser runs a command as the unit's user, as its setpriv arguments say.
func asUser(t *testing.T, u *user.User, args ...string) string {
	return run(t, "setpriv", append(userArgs(u), args...)...)
}

// userArgs are setpriv's arguments that make a command the unit's user's.
func userArgs(u *user.User) []string {
	return []string{"--reuid=" + u.Uid, "--regid=" + u.Gid, "--init-groups"}
}

// startUnit runs the unit's ExecStart for c's only member as the unit's
// user, with the unit's environment pointing at file, waits until the
// member is ready, and returns a function that stops it with SIGTERM and
// asserts a clean exit.
func startUnit(t *testing.T, u *user.User, c *config.Cluster, file string) (stop func()) {
	m := c.Shards[0].Members[0]
	exec1 := unitValues(t, "ExecStart")
	require.Len(t, exec1, 1)
	args := strings.Fields(strings.ReplaceAll(exec1[0], "%i", m.ID))
	cmd := exec.Command("setpriv", append(userArgs(u), args...)...)
	cmd.Env = append(os.Environ(), "XKEEPER_CONFIG="+file)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	ready := "http://" + m.HTTPAddr + "/ready"
	require.Eventually(t, func() bool {
		resp, err := http.Get(ready)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "the member becomes ready")
	return func() {
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		select {
		case err := <-exited:
			assert.NoError(t, err, "a clean stop on SIGTERM")
		case <-time.After(30 * time.Second):
			t.Fatal("no exit 30 s after SIGTERM")
		}
	}
}

// connect opens a ZooKeeper session with c's only member.
func connect(t *testing.T, c *config.Cluster) *zk.Conn {
	conn, err := bench.Connect([]string{c.Shards[0].Members[0].ClientAddr})
	require.NoError(t, err)
	return conn
}

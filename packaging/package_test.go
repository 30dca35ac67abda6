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
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
// ExecStart), and removes and purges it. It changes the machine, so it runs
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
// /var/lib/xkeeper; it must become ready and stop cleanly on SIGTERM.
func member(t *testing.T, u *user.User) {
	dir, err := os.MkdirTemp("/var/lib/xkeeper", "pkgtest-")
	require.NoError(t, err)
	defer os.RemoveAll(dir)
	ports := testenv.FreePorts(t, 3)
	c, err := config.Layout(dir, 1, 1, ports[:2], config.Default())
	require.NoError(t, err)
	c.Shards[0].Members[0].HTTPAddr = fmt.Sprintf("127.0.0.1:%d", ports[2])
	file := filepath.Join(dir, "cluster.yaml")
	require.NoError(t, c.Write(file))
	run(t, "chown", "-R", "xkeeper:xkeeper", dir)

	require.Equal(t, []string{"xkeeper"}, unitValues(t, "User"))
	// The first start of a new shard, as README says: mark the member's
	// empty directory as the unit's user, then start the unit's command.
	id := c.Shards[0].Members[0].ID
	run(t, "setpriv", "--reuid="+u.Uid, "--regid="+u.Gid, "--init-groups",
		"/usr/bin/xkeeper", "bootstrap", "--config", file, "--member", id)
	exec1 := unitValues(t, "ExecStart")
	require.Len(t, exec1, 1)
	args := strings.Fields(strings.ReplaceAll(exec1[0], "%i", id))
	cmd := exec.Command("setpriv", append([]string{"--reuid=" + u.Uid, "--regid=" + u.Gid, "--init-groups"}, args...)...)
	cmd.Env = append(os.Environ(), "XKEEPER_CONFIG="+file)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill()
	ready := "http://" + c.Shards[0].Members[0].HTTPAddr + "/ready"
	require.Eventually(t, func() bool {
		resp, err := http.Get(ready)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "the member becomes ready")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		assert.NoError(t, err, "a clean stop on SIGTERM")
	case <-time.After(30 * time.Second):
		t.Fatal("no exit 30 s after SIGTERM")
	}
}

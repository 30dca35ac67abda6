package testenv

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBootSystemdKeepsTheHostAsItWas boots systemd, writes where a package
// install writes and checks that the files are seen inside only, that
// Dial does not reach the host's loopback, and that nothing of the
// namespace is left when the test ends.
func TestBootSystemdKeepsTheHostAsItWas(t *testing.T) {
	var cgroup string
	t.Run("boot", func(t *testing.T) {
		s := BootSystemd(t)
		cgroup = s.cgroup
		probe := "xkeeper-systemd-probe-" + filepath.Base(s.cgroup)
		for _, dir := range []string{"/etc", "/usr/lib", "/var/lib", "/root", "/tmp", "/dev"} {
			path := filepath.Join(dir, probe)
			s.Run("touch", path)
			assert.FileExists(t, s.Path(path), "seen inside")
			assert.NoFileExists(t, path, "the host's %s is not changed", dir)
		}
		assert.Equal(t, "systemd\n", s.Run("cat", "/proc/1/comm"), "systemd is PID 1 of its PID namespace")
		_, err := os.Stat(filepath.Join(cgroup, "init.scope"))
		assert.NoError(t, err, "systemd runs in the cgroup made for it")

		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		conn, err := s.Dial("tcp", l.Addr().String(), time.Second)
		if err == nil {
			conn.Close()
		}
		assert.Error(t, err, "Dial is in the namespaces' network: the host's listener is not there")
	})
	if cgroup != "" {
		assert.NoDirExists(t, cgroup, "the namespace's cgroup goes with it")
	}
}

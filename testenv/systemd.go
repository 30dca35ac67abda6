package testenv

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Systemd is systemd booted as PID 1 of fresh namespaces (PID, mount,
// UTS, IPC, network, cgroup), the way a container runs it, for tests that
// drive real units: install a package, systemctl start, stop. The host
// stays as it was: /etc, /usr and /var are overlays whose changes go to
// the test's temporary directory, /run, /tmp, /root, /home and /dev are
// private, /sys and /proc/sys are read-only, and the units that would
// reach the kernel's global state (sysctls, modules, remounts, the clock,
// binfmt) are masked. Its network is its own loopback only: Dial and
// HTTPClient reach addresses inside it. Everything in it is killed when
// the test ends. It needs root, systemd, nsenter, overlayfs and cgroup v2:
// without them BootSystemd skips, or fails with XKEEPER_REQUIRE_SYSTEMD=1.
type Systemd struct {
	t      testing.TB
	pid    int    // systemd's PID in this process's namespace
	cgroup string // the cgroup v2 directory the namespace runs in
	log    string // systemd's console output
}

// systemdBootScript runs as PID 1 of the new namespaces (its one argument
// the directory for the overlays' changes) and execs systemd.
const systemdBootScript = `set -eu
base=$1
mount --make-rprivate /
for d in etc usr var; do
	mkdir -p "$base/$d.upper" "$base/$d.work"
	mount -t overlay overlay -o "lowerdir=/$d,upperdir=$base/$d.upper,workdir=$base/$d.work" "/$d"
done
mount -t proc proc /proc
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
mount -o remount,bind,ro /sys
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=0700 tmpfs /root
mount -t tmpfs -o mode=0755 tmpfs /home
mount -t tmpfs -o mode=0755,nosuid tmpfs /dev
mknod -m 666 /dev/null c 1 3
mknod -m 666 /dev/zero c 1 5
mknod -m 666 /dev/full c 1 7
mknod -m 666 /dev/random c 1 8
mknod -m 666 /dev/urandom c 1 9
mknod -m 666 /dev/tty c 5 0
mkdir /dev/pts /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /dev/pts
ln -s pts/ptmx /dev/ptmx
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
ln -s /proc/self/fd /dev/fd
ln -s /proc/self/fd/0 /dev/stdin
ln -s /proc/self/fd/1 /dev/stdout
ln -s /proc/self/fd/2 /dev/stderr
mkdir -p /run/systemd/system
printf '[Unit]\nDescription=Test boot: nothing but what is started\n' >/run/systemd/system/xkeeper-test.target
for unit in systemd-remount-fs.service systemd-modules-load.service systemd-sysctl.service \
	systemd-tmpfiles-setup-dev.service kmod-static-nodes.service systemd-binfmt.service \
	proc-sys-fs-binfmt_misc.automount systemd-timesyncd.service systemd-pstore.service \
	systemd-journald-audit.socket sys-kernel-config.mount sys-kernel-debug.mount \
	sys-kernel-tracing.mount sys-fs-fuse-connections.mount systemd-firstboot.service \
	systemd-repart.service systemd-udevd.service; do
	ln -s /dev/null "/run/systemd/system/$unit"
done
export container=other
exec /lib/systemd/systemd --system --unit=xkeeper-test.target
`

// BootSystemd boots systemd in new namespaces and waits until it has
// started (systemctl is-system-running says running or degraded).
func BootSystemd(t testing.TB) *Systemd {
	t.Helper()
	const requireEnv = "XKEEPER_REQUIRE_SYSTEMD"
	if os.Geteuid() != 0 {
		skipOrFail(t, requireEnv, "booting systemd in namespaces needs root")
	}
	for _, cmd := range []string{"/lib/systemd/systemd", "nsenter", "mount", "mknod", "bash"} {
		if _, err := exec.LookPath(cmd); err != nil {
			skipOrFail(t, requireEnv, "booting systemd needs systemd and util-linux (apt-get install systemd util-linux): %v", err)
		}
	}
	if fs, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(fs), "\toverlay\n") {
		skipOrFail(t, requireEnv, "booting systemd needs overlayfs to keep the host's /etc, /usr and /var as they are")
	}
	parent, err := ownCgroup()
	if err != nil {
		skipOrFail(t, requireEnv, "booting systemd needs cgroup v2: %v", err)
	}
	base := t.TempDir()
	for _, d := range []string{"/etc", "/usr", "/var"} {
		if strings.HasPrefix(base+"/", d+"/") {
			t.Fatalf("the temporary directory %s is under %s, which the boot overlays: set TMPDIR elsewhere", base, d)
		}
	}
	s := &Systemd{t: t, log: filepath.Join(base, "console.log")}
	if s.cgroup, err = os.MkdirTemp(parent, "xkeeper-systemd-"); err != nil {
		skipOrFail(t, requireEnv, "booting systemd needs a cgroup of its own: %v", err)
	}
	cg, err := os.Open(s.cgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	logFile, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command("bash", "-c", systemdBootScript, "boot", base)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET | syscall.CLONE_NEWCGROUP,
		UseCgroupFD: true,
		CgroupFD:    int(cg.Fd()),
		Pdeathsig:   syscall.SIGKILL, // the test's end ends systemd, and PID 1's end its namespace
	}
	// Pdeathsig comes when the thread that started the child ends, not
	// the process: this goroutine keeps its thread, which no other
	// goroutine can then end, until systemd exits.
	started, exited := make(chan error, 1), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer close(exited)
		err := cmd.Start()
		started <- err
		if err == nil {
			cmd.Wait()
		}
	}()
	if err := <-started; err != nil {
		os.Remove(s.cgroup)
		skipOrFail(t, requireEnv, "systemd's namespaces cannot be made here: %v", err)
	}
	s.pid = cmd.Process.Pid
	t.Cleanup(func() { s.kill(exited) })

	deadline := time.Now().Add(30 * time.Second)
	var state string
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			skipOrFail(t, requireEnv, "systemd exited while booting:\n%s", indent(tailFile(s.log, 30)))
		default:
		}
		out, _ := s.Command("systemctl", "is-system-running").Output()
		state = strings.TrimSpace(string(out))
		if state == "running" || state == "degraded" {
			if state == "degraded" {
				failed, _ := s.Command("systemctl", "--failed", "--no-legend", "--plain").CombinedOutput()
				t.Logf("systemd booted degraded; failed units:\n%s", indent(strings.TrimSpace(string(failed))))
			}
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
	skipOrFail(t, requireEnv, "systemd did not finish booting in 30 s (state %q):\n%s", state, indent(tailFile(s.log, 30)))
	return nil
}

// ownCgroup returns the cgroup v2 directory this process runs in.
func ownCgroup() (string, error) {
	mount := ""
	mounts, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer mounts.Close()
	sc := bufio.NewScanner(mounts)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if fields := strings.Fields(pre); ok && strings.HasPrefix(post, "cgroup2 ") && len(fields) > 4 {
			mount = fields[4]
			break
		}
	}
	if mount == "" {
		return "", fmt.Errorf("no cgroup2 file system is mounted")
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(own), "\n") {
		if path, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(mount, path), nil
		}
	}
	return "", fmt.Errorf("no cgroup v2 line in /proc/self/cgroup")
}

// kill ends the namespace (SIGKILL to its PID 1 takes every process in
// it), waits for its processes to go and removes its cgroups.
func (s *Systemd) kill(exited <-chan struct{}) {
	syscall.Kill(s.pid, syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		s.t.Errorf("systemd (pid %d) still runs 30 s after SIGKILL", s.pid)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		events, err := os.ReadFile(filepath.Join(s.cgroup, "cgroup.events"))
		if err != nil || strings.Contains(string(events), "populated 0") {
			break
		}
		if time.Now().After(deadline) {
			s.t.Errorf("processes of systemd's namespace are left in %s", s.cgroup)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	var dirs []string
	filepath.WalkDir(s.cgroup, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- { // children before their parents
		if err := os.Remove(dirs[i]); err != nil {
			s.t.Errorf("removing systemd's cgroup: %v", err)
		}
	}
}

// Command is a command to run inside the namespaces, as root.
func (s *Systemd) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--target", fmt.Sprint(s.pid), "--all", "--", name}, args...)...)
}

// Run runs a command inside the namespaces and returns its combined
// output, failing the test on a non-zero exit.
func (s *Systemd) Run(name string, args ...string) string {
	s.t.Helper()
	out, err := s.Command(name, args...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("inside systemd's namespaces: %s %s: %v\n%s", name, strings.Join(args, " "), err, indent(string(out)))
	}
	return string(out)
}

// Path is where this process reaches path of the namespaces' files.
func (s *Systemd) Path(path string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", s.pid), path)
}

// Show returns unit's properties as systemctl show gives them.
func (s *Systemd) Show(unit string, properties ...string) map[string]string {
	s.t.Helper()
	out := s.Run("systemctl", "show", "--property="+strings.Join(properties, ","), unit)
	values := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			values[k] = v
		}
	}
	return values
}

// Dial connects to addr in the namespaces' network: the socket is made
// by a thread that joined that network namespace and ends with the call.
func (s *Systemd) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	type dialed struct {
		conn net.Conn
		err  error
	}
	done := make(chan dialed, 1)
	go func() {
		// Never unlocked: the thread, in another network namespace, ends
		// with this goroutine instead of going back to the scheduler.
		runtime.LockOSThread()
		ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", s.pid))
		if err != nil {
			done <- dialed{err: err}
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- dialed{err: fmt.Errorf("joining systemd's network namespace: %w", err)}
			return
		}
		conn, err := net.DialTimeout(network, addr, timeout)
		done <- dialed{conn, err}
	}()
	d := <-done
	return d.conn, d.err
}

// HTTPClient is an HTTP client whose connections are made by Dial, one
// per request (none is kept past the namespaces' end).
func (s *Systemd) HTTPClient() *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			timeout := 5 * time.Second
			if d, ok := ctx.Deadline(); ok {
				timeout = time.Until(d)
			}
			return s.Dial(network, addr, timeout)
		}},
	}
}

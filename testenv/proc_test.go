package testenv

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// gone polls until pid is dead (a signal reaches a process asynchronously)
// and reports whether it died within two seconds.
func gone(pid int) bool {
	deadline := time.Now().Add(2 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// startShell starts script under sh and waits until it has written the pid of
// its background child to a file, which it returns with the process.
func startShell(t *testing.T, script string) (*Process, int) {
	t.Helper()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	cmd := exec.Command("/bin/sh", "-c", script, "sh", pidFile)
	p, err := StartProcess(t, cmd, filepath.Join(dir, "out.log"))
	require.NoError(t, err)
	var child int
	err = p.WaitReady(10*time.Second, func(context.Context) error {
		data, err := os.ReadFile(pidFile)
		if err == nil && strings.HasSuffix(string(data), "\n") {
			child, err = strconv.Atoi(strings.TrimSpace(string(data)))
		} else if err == nil {
			err = errors.New("pid file incomplete")
		}
		return err
	})
	require.NoError(t, err)
	return p, child
}

func TestProcessKillKillsWholeGroup(t *testing.T) {
	p, child := startShell(t, `sleep 1000 & echo $! > "$1"; echo started; wait`)
	if !alive(child) {
		t.Fatalf("background child %d not running", child)
	}
	p.Kill()
	select {
	case <-p.Done():
	default:
		t.Fatal("Kill returned before the process was waited for")
	}
	if !gone(child) {
		t.Fatalf("background child %d survived Kill of its group", child)
	}
	if got := p.LogTail(5); got != "started" {
		t.Fatalf("LogTail = %q, want the process's output", got)
	}
}

func TestProcessStopEscalatesToKill(t *testing.T) {
	p, child := startShell(t, `trap '' TERM; sleep 1000 & echo $! > "$1"; wait; wait`)
	if p.Stop(200 * time.Millisecond) {
		t.Fatal("Stop reported a graceful exit of a process that ignores SIGTERM")
	}
	if !gone(child) || !gone(p.PID()) {
		t.Fatal("process group survived Stop")
	}
}

func TestWaitReadyReportsEarlyExit(t *testing.T) {
	dir := t.TempDir()
	p, err := StartProcess(t, exec.Command("/bin/sh", "-c", "exit 3"), filepath.Join(dir, "out.log"))
	require.NoError(t, err)
	err = p.WaitReady(time.Minute, func(context.Context) error { return errors.New("never ready") })
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("WaitReady = %v, want an error saying the process exited", err)
	}
}

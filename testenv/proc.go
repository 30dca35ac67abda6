package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pollInterval is how often readiness checks are retried.
const pollInterval = 50 * time.Millisecond

// Process is a child process started by StartProcess. It runs in its own
// process group, which is killed as a whole.
type Process struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once the process has been waited for
	err     error         // result of Wait, valid after done is closed
}

// StartProcess starts cmd in a new process group with stdout and stderr
// appended to logPath, and registers a cleanup on t that kills the group and
// waits for the process. cmd must not have been started.
func StartProcess(t testing.TB, cmd *exec.Cmd, logPath string) (*Process, error) {
	t.Helper()
	p, err := startProcess(cmd, logPath)
	if err != nil {
		return nil, err
	}
	t.Cleanup(p.Kill)
	return p, nil
}

// startProcess is StartProcess for a caller that stops the process itself.
func startProcess(cmd *exec.Cmd, logPath string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	// If this process dies without stopping it, take the child along.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &Process{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// PID returns the process id, which is also its process group id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been waited for.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err returns how the process ended; it blocks until the process has exited.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Signal sends sig to the whole process group.
func (p *Process) Signal(sig syscall.Signal) error {
	err := syscall.Kill(-p.PID(), sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil // already gone
	}
	return err
}

// Kill sends SIGKILL to the process group and waits for the process.
func (p *Process) Kill() {
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM to the process group, waits up to grace for the process
// to exit, then kills the group. It reports whether the exit was graceful.
func (p *Process) Stop(grace time.Duration) bool {
	select {
	case <-p.done:
		_ = p.Signal(syscall.SIGKILL) // reap anything left in the group
		return true
	default:
	}
	_ = p.Signal(syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		_ = p.Signal(syscall.SIGKILL)
		return true
	case <-timer.C:
		p.Kill()
		return false
	}
}

// LogTail returns the last n lines of the process's stdout and stderr.
func (p *Process) LogTail(n int) string { return tailFile(p.logPath, n) }

// WaitReady calls check every pollInterval until it succeeds, the process
// exits, or timeout passes. The error names the last failed check.
func (p *Process) WaitReady(timeout time.Duration, check func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, time.Second)
		err := check(attempt)
		cancelAttempt()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("process exited (%v) before it was ready: %w", p.err, err)
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v: %w", timeout, err)
		case <-ticker.C:
		}
	}
}

// tailFile returns the last n lines of the file at path, or "" if it cannot
// be read.
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const maxTail = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > maxTail {
		if _, err := f.Seek(st.Size()-maxTail, io.SeekStart); err != nil {
			return ""
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// skipOrFail skips the test because an external server is not installed, or
// fails it when the environment variable requireEnv is "1".
func skipOrFail(t testing.TB, requireEnv, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("%s (required by %s=1)", msg, requireEnv)
	}
	t.Skipf("%s (set %s=1 to fail instead of skipping)", msg, requireEnv)
}

// firstExisting returns the first of paths that exists, or "".
func firstExisting(paths ...string) string {
	for _, p := range paths {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// indent prefixes every line of s for nesting logs in failure messages.
func indent(s string) string {
	if s == "" {
		return "    (empty)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// RSS returns a process's resident set size in bytes, from /proc.
func RSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("bench: no VmRSS for pid %d", pid)
}

// ListeningPorts counts the TCP ports the processes listen on: their
// sockets (from /proc/PID/fd) that their network namespace's TCP tables
// list in the LISTEN state.
func ListeningPorts(pids ...int) (int, error) {
	const listen = 10 // TCP_LISTEN in /proc/net/tcp
	n := 0
	for _, pid := range pids {
		p, err := procfs.NewProc(pid)
		if err != nil {
			return 0, err
		}
		fds, err := p.FileDescriptorTargets()
		if err != nil {
			return 0, err
		}
		sockets := map[uint64]bool{}
		for _, fd := range fds {
			if inode, ok := strings.CutPrefix(fd, "socket:["); ok {
				if v, err := strconv.ParseUint(strings.TrimSuffix(inode, "]"), 10, 64); err == nil {
					sockets[v] = true
				}
			}
		}
		fs, err := procfs.NewFS(fmt.Sprintf("/proc/%d", pid)) // its own namespace's net/tcp
		if err != nil {
			return 0, err
		}
		for _, table := range []func() (procfs.NetTCP, error){fs.NetTCP, fs.NetTCP6} {
			lines, err := table()
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return 0, err
			}
			for _, l := range lines {
				if l.St == listen && sockets[l.Inode] {
					n++
				}
			}
		}
	}
	return n, nil
}

// ProcessCPU returns the CPU time, user and system, that the processes
// have used so far, in seconds, from /proc (10 ms resolution).
func ProcessCPU(pids ...int) (float64, error) {
	total := 0.0
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, err
		}
		// utime and stime are fields 14 and 15, in clock ticks (100 a second);
		// the command name before them may hold spaces, so count after ")".
		_, rest, _ := strings.Cut(string(stat), ") ")
		f := strings.Fields(rest)
		if len(f) < 13 {
			return 0, fmt.Errorf("bench: /proc/%d/stat has %d fields", pid, len(f))
		}
		utime, err1 := strconv.ParseFloat(f[11], 64)
		stime, err2 := strconv.ParseFloat(f[12], 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, fmt.Errorf("bench: /proc/%d/stat: %w", pid, err)
		}
		total += (utime + stime) / 100
	}
	return total, nil
}

// WriteTable prints results as an aligned text table.
func WriteTable(w io.Writer, rs []Result) {
	fmt.Fprintf(w, "%-9s %7s %9s %10s %8s %8s %8s %8s %8s  %s\n",
		"op", "clients", "requests", "ops/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "errors")
	for _, r := range rs {
		fmt.Fprintf(w, "%-9s %7d %9d %10.0f %8.2f %8.2f %8.2f %8.2f %8.2f  %s\n",
			r.Op, r.Clients, r.Requests, r.Throughput, r.P50, r.P90, r.P99, r.P999, r.Max, FormatErrors(r.Errors))
	}
}

// FormatErrors lists errors by code as "code=count,…", sorted, or "-".
func FormatErrors(errs map[string]int) string {
	if len(errs) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, errs[k])
	}
	return strings.Join(parts, ",")
}

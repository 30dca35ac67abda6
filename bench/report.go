package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
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

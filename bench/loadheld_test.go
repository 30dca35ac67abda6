package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestMeasureLoadHeld measures whether a 3-member shard holds its latency
// under connection load (runs only with XKEEPER_BENCH=1): 16 clients of
// setData, then of getData, once quietly and once beside 5,000 idle
// pinging sessions (from 127.0.0.2–254, under the per-IP cap) and a
// hostile client on 127.0.0.1 that keeps opening connections and never
// sends a byte. It prints both figures, the p99 ratio against the ≤ 2×
// goal, what the server did with the hostile connections, the members'
// RSS and the CPU each process used.
//
//	XKEEPER_BENCH=1 XKEEPER_BENCH_DURATION=5s go test ./bench -run TestMeasureLoadHeld -v -timeout 20m
func TestMeasureLoadHeld(t *testing.T) {
	if !benchEnabled() {
		t.Skip("measurement run: set XKEEPER_BENCH=1")
	}
	const idleConns, floodPerRun, floodRate = 5000, 1500, 200
	dur := envDuration("XKEEPER_BENCH_DURATION", 5*time.Second)
	pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Members: 3, Fsync: true, Keeper: productionRaft})
	servers := pc.Servers("a")
	ctx := context.Background()
	t.Logf("machine: %d CPUs, %s", runtime.NumCPU(), runtime.Version())
	ops := []string{"set", "get"}
	options := func(op string) Options {
		return Options{Servers: servers, Op: op, Clients: 16, Duration: dur, Warmup: time.Second, DataSize: 100}
	}

	var quiet, loaded []Result
	quietCPU := startCPU(t, pc)
	for _, op := range ops {
		r, err := Run(ctx, options(op))
		require.NoError(t, err)
		quiet = append(quiet, r)
	}
	quietBusy := quietCPU.busy(t)
	rssQuiet := rssAll(t, pc)

	start := time.Now()
	idle := openIdle(servers, idleConns)
	defer idle.close()
	t.Logf("idle sessions: %d opened in %v, %d failed (first error: %v)",
		idle.opened(), time.Since(start).Round(time.Millisecond), idle.failed, idle.firstErr)
	rssIdle := rssAll(t, pc)

	var hostile floodStats
	var rssLoaded map[string]int64
	var probes []string
	loadedCPU := startCPU(t, pc)
	for _, op := range ops {
		o := options(op)
		base := settledConns(t, servers)
		var r Result
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			r, err = Run(ctx, o)
		}()
		// The benchmark's clients dial from 127.0.0.1 too: the flood starts
		// once they are in, or it would take their places under the cap.
		waitAlive(t, servers, base+o.Clients, done)
		f := startFlood(servers, floodPerRun, floodRate)
		// A well-behaved client on the flooded address once the flood has
		// had time to fill its cap, for comparison.
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
		if nc, _, err := idleHandshake(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, servers[0]); err != nil {
			probes = append(probes, "refused: "+err.Error())
		} else {
			nc.Close()
			probes = append(probes, "accepted")
		}
		<-done
		rssLoaded = rssAll(t, pc)
		hostile.add(f.stop())
		require.NoError(t, err)
		loaded = append(loaded, r)
	}
	loadedBusy := loadedCPU.busy(t)
	lost := idle.close()

	w := testWriter{t}
	WriteTable(w, append(append([]Result{}, quiet...), loaded...))
	var b strings.Builder
	fmt.Fprintf(&b, "%-4s | %-30s | %-30s | %s\n", "op", "quiet ops/s p50 p99 ms", "loaded ops/s p50 p99 ms", "p99 loaded/quiet (goal ≤ 2×)")
	for i, q := range quiet {
		l := loaded[i]
		ratio := l.P99 / q.P99
		verdict := "met"
		if ratio > 2 {
			verdict = "MISSED"
		}
		fmt.Fprintf(&b, "%-4s | %8.0f %9.2f %9.2f   | %8.0f %9.2f %9.2f   | %.2f× %s (errors loaded: %s)\n",
			q.Op, q.Throughput, q.P50, q.P99, l.Throughput, l.P50, l.P99, ratio, verdict, FormatErrors(l.Errors))
	}
	fmt.Fprintf(&b, "idle sessions: %d of %d open, %d lost before the end\n", idle.opened(), idleConns, lost)
	fmt.Fprintf(&b, "hostile client (127.0.0.1, no handshake): %d attempts: %d refused (closed by the server without a byte, "+
		"after %v to %v), %d held until the flood stopped, %d answered, %d dials failed\n",
		hostile.attempts, hostile.refused, hostile.refusedMin.Round(time.Millisecond), hostile.refusedMax.Round(time.Millisecond),
		hostile.held, hostile.answered, hostile.dialFailed)
	fmt.Fprintf(&b, "a handshake from 127.0.0.1 2 s into each flood: %s\n", strings.Join(probes, "; "))
	for _, m := range pc.Config.Shards[0].Members {
		tail := pc.Process(m.ID).LogTail(1000)
		fmt.Fprintf(&b, "member %s RSS: quiet %d MiB, with idle sessions %d MiB, loaded %d MiB; %d \"too many connections\" log lines\n",
			m.ID, rssQuiet[m.ID]>>20, rssIdle[m.ID]>>20, rssLoaded[m.ID]>>20, strings.Count(tail, "too many connections"))
	}
	fmt.Fprintf(&b, "cores busy (CPU seconds per second), quiet → loaded: %s\n", strings.Join(busyPairs(quietBusy, loadedBusy), ", "))
	t.Log("\n" + b.String())

}

// cpuMeter measures the CPU the members and this process use over a phase.
type cpuMeter struct {
	pids  map[string]int
	start map[string]float64
	t0    time.Time
}

func startCPU(t *testing.T, pc *testenv.ProcessCluster) *cpuMeter {
	m := &cpuMeter{pids: map[string]int{"bench": os.Getpid()}, t0: time.Now()}
	for _, mb := range pc.Config.Shards[0].Members {
		m.pids[mb.ID] = pc.Process(mb.ID).PID()
	}
	m.start = m.read(t)
	return m
}

func (m *cpuMeter) read(t *testing.T) map[string]float64 {
	out := map[string]float64{}
	for id, pid := range m.pids {
		v, err := ProcessCPU(pid)
		require.NoError(t, err)
		out[id] = v
	}
	return out
}

// busy returns each process's CPU seconds per second since startCPU.
func (m *cpuMeter) busy(t *testing.T) map[string]float64 {
	now, wall := m.read(t), time.Since(m.t0).Seconds()
	out := map[string]float64{}
	for id, v := range now {
		out[id] = (v - m.start[id]) / wall
	}
	return out
}

func busyPairs(a, b map[string]float64) []string {
	ids := slices.Sorted(maps.Keys(a))
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = fmt.Sprintf("%s %.2f → %.2f", id, a[id], b[id])
	}
	return out
}

// idleSessions holds ZooKeeper sessions that only ping.
type idleSessions struct {
	done     chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
	failed   int
	firstErr error
	lost     atomic.Int64 // sessions whose connection broke before close
	closed   bool
}

// openIdle opens n sessions spread over servers and over the source
// addresses 127.0.0.2–254, 64 handshakes at a time; each then pings every
// third of its session timeout until close.
func openIdle(servers []string, n int) *idleSessions {
	s := &idleSessions{done: make(chan struct{})}
	sem := make(chan struct{}, 64)
	var opening sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		opening.Add(1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%253))}
			nc, every, err := idleHandshake(src, servers[i%len(servers)])
			<-sem
			s.mu.Lock()
			if err != nil {
				s.failed++
				if s.firstErr == nil {
					s.firstErr = err
				}
			} else {
				s.conns = append(s.conns, nc)
			}
			s.mu.Unlock()
			opening.Done()
			if err == nil {
				s.ping(nc, every)
			}
		}()
	}
	opening.Wait()
	return s
}

// idleHandshake opens a session from src and returns its connection and
// the ping interval its granted timeout asks for.
func idleHandshake(src *net.TCPAddr, server string) (net.Conn, time.Duration, error) {
	d := net.Dialer{LocalAddr: src, Timeout: 10 * time.Second}
	nc, err := d.Dial("tcp", server)
	if err != nil {
		return nil, 0, err
	}
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	var resp proto.ConnectResponse
	_, err = nc.Write(proto.AppendFrame(nil, &proto.ConnectRequest{Timeout: 30000, Passwd: make([]byte, 16)}))
	if err == nil {
		err = readRecord(nc, &resp)
	}
	if err == nil && resp.SessionID == 0 {
		err = errors.New("no session granted")
	}
	if err != nil {
		nc.Close()
		return nil, 0, fmt.Errorf("%s from %s: %w", server, src.IP, err)
	}
	return nc, max(time.Duration(resp.Timeout)*time.Millisecond/3, 100*time.Millisecond), nil
}

// readRecord reads one frame into r.
func readRecord(nc net.Conn, r proto.Record) error {
	b, err := proto.ReadFrame(nc, proto.DefaultMaxPacket)
	if err != nil {
		return err
	}
	return proto.Unmarshal(b, r)
}

// ping keeps a session alive until close, first after a random part of
// every so that the sessions' pings spread out.
func (s *idleSessions) ping(nc net.Conn, every time.Duration) {
	frame := proto.AppendFrame(nil, &proto.RequestHeader{Xid: -2, OpCode: proto.OpPing})
	timer := time.NewTimer(rand.N(every))
	defer timer.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-timer.C:
		}
		nc.SetDeadline(time.Now().Add(every))
		var h proto.ReplyHeader
		_, err := nc.Write(frame)
		if err == nil {
			err = readRecord(nc, &h)
		}
		if err == nil && (h.Xid != -2 || h.Err != proto.ErrOK) {
			err = fmt.Errorf("ping answered xid %d: %w", h.Xid, h.Err)
		}
		if err != nil {
			select {
			case <-s.done:
			default:
				s.lost.Add(1)
			}
			return
		}
		timer.Reset(every)
	}
}

func (s *idleSessions) opened() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// close closes every session's connection, waits for the pingers and
// returns how many sessions were lost before.
func (s *idleSessions) close() int64 {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
		for _, nc := range s.conns {
			nc.Close()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
	return s.lost.Load()
}

// floodStats is what became of a hostile client's connections: refused
// (closed by the server without a byte, after refusedMin to refusedMax),
// held (still open when the flood stopped) or answered (a byte came).
type floodStats struct {
	attempts, dialFailed, refused, held, answered int
	refusedMin, refusedMax                        time.Duration
}

func (a *floodStats) add(b floodStats) {
	if a.refused == 0 || (b.refused > 0 && b.refusedMin < a.refusedMin) {
		a.refusedMin = b.refusedMin
	}
	a.refusedMax = max(a.refusedMax, b.refusedMax)
	a.attempts += b.attempts
	a.dialFailed += b.dialFailed
	a.refused += b.refused
	a.held += b.held
	a.answered += b.answered
}

// flood is a hostile client on 127.0.0.1: it opens connections to the
// members in turn, rate a second and at most limit in all, never sends a
// byte and keeps each open until the server closes it or stop.
type flood struct {
	done    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
	stopped bool
	st      floodStats
}

func startFlood(servers []string, limit, rate int) *flood {
	f := &flood{done: make(chan struct{})}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := range limit {
			select {
			case <-f.done:
				return
			case <-tick.C:
			}
			f.wg.Add(1)
			go f.attempt(servers[i%len(servers)])
		}
	}()
	return f
}

// attempt opens one connection and waits for the server to end it.
func (f *flood) attempt(server string) {
	defer f.wg.Done()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, Timeout: 2 * time.Second}
	t0 := time.Now()
	nc, err := d.Dial("tcp", server)
	f.mu.Lock()
	f.st.attempts++
	if err != nil {
		f.st.dialFailed++
		f.mu.Unlock()
		return
	}
	if f.stopped {
		nc.Close()
	}
	f.conns = append(f.conns, nc)
	f.mu.Unlock()
	n, err := nc.Read(make([]byte, 1))
	open := time.Since(t0)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case n > 0:
		f.st.answered++
	case errors.Is(err, net.ErrClosed): // stop closed it
		f.st.held++
	default:
		if f.st.refused == 0 || open < f.st.refusedMin {
			f.st.refusedMin = open
		}
		f.st.refusedMax = max(f.st.refusedMax, open)
		f.st.refused++
	}
	nc.Close()
}

// stop ends the flood, closes its connections and returns what became of
// them.
func (f *flood) stop() floodStats {
	close(f.done)
	f.mu.Lock()
	f.stopped = true
	for _, nc := range f.conns {
		nc.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	return f.st
}

// aliveConns sums the members' zk_num_alive_connections (mntr).
func aliveConns(t *testing.T, servers []string) int {
	total := 0
	for _, s := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		out, err := testenv.FourLetterWord(ctx, s, "mntr")
		cancel()
		require.NoError(t, err)
		for line := range strings.Lines(out) {
			if v, ok := strings.CutPrefix(line, "zk_num_alive_connections\t"); ok {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				require.NoError(t, err)
				total += n
			}
		}
	}
	return total
}

// settledConns returns aliveConns once two readings 100 ms apart agree
// (connections just closed leave the count late).
func settledConns(t *testing.T, servers []string) int {
	n := aliveConns(t, servers)
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		m := aliveConns(t, servers)
		if m == n {
			break
		}
		n = m
	}
	return n
}

// waitAlive waits until the members hold at least want connections or
// done is closed.
func waitAlive(t *testing.T, servers []string, want int, done <-chan struct{}) {
	deadline := time.Now().Add(30 * time.Second)
	for n := aliveConns(t, servers); n < want; n = aliveConns(t, servers) {
		require.True(t, time.Now().Before(deadline), "members hold %d connections, want %d", n, want)
		select {
		case <-done:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Ops lists the operations a run can measure.
var Ops = []string{"create", "set", "get", "exists", "children", "multi", "insert"}

// Options describe one run.
type Options struct {
	Servers  []string
	Clients  int
	Op       string
	Duration time.Duration // run length, if Requests is 0
	Requests int           // total requests across clients
	Warmup   time.Duration // discarded first part of the run
	DataSize int           // bytes of data per create/set
	KeySpace int           // nodes that get/set/exists pick from
	Width    int           // children of the wide parent for "children"
	MultiOps int           // ops in one "multi"
	Prefix   string        // root of the benchmark's nodes
	// ServerCPU, if set, returns the CPU seconds the servers have used so
	// far (such as ProcessCPU of their processes); Run then reports the
	// servers' CPU per operation of the measured part.
	ServerCPU func() (float64, error)
}

// Result is what a run measured.
type Result struct {
	Op         string         `json:"op"`
	Clients    int            `json:"clients"`
	Requests   int            `json:"requests"`
	Seconds    float64        `json:"seconds"`
	Throughput float64        `json:"ops_per_sec"`
	P50        float64        `json:"p50_ms"`
	P90        float64        `json:"p90_ms"`
	P99        float64        `json:"p99_ms"`
	P999       float64        `json:"p999_ms"`
	Max        float64        `json:"max_ms"`
	Longest    float64        `json:"longest_call_ms"` // the longest call that ended in the window, counted or not: a stall Max misses
	Errors     map[string]int `json:"errors,omitempty"`
	CPUPerOp   float64        `json:"server_cpu_us_per_op,omitempty"` // with Options.ServerCPU
	Where      string         `json:"where,omitempty"`                // which member the clients used, if one
}

func (o *Options) defaults() error {
	if len(o.Servers) == 0 {
		return errors.New("bench: no servers")
	}
	if !slices.Contains(Ops, o.Op) {
		return fmt.Errorf("bench: unknown op %q (one of %s)", o.Op, strings.Join(Ops, ", "))
	}
	if o.Clients <= 0 {
		o.Clients = 1
	}
	if o.Duration <= 0 && o.Requests <= 0 {
		o.Duration = 5 * time.Second
	}
	if o.DataSize < 0 {
		o.DataSize = 0
	}
	if o.KeySpace <= 0 {
		o.KeySpace = 1000
	}
	if o.Width <= 0 {
		o.Width = 1000
	}
	if o.MultiOps <= 0 {
		o.MultiOps = 4
	}
	if o.Prefix == "" {
		o.Prefix = "/xkeeper-bench"
	}
	return nil
}

// ParseCounts parses a comma-separated list of positive counts, such as
// client counts "1,16,64".
func ParseCounts(v string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// Connect opens a go-zookeeper session and waits for it.
func Connect(servers []string) (*zk.Conn, error) {
	return ConnectDialing(servers, net.DialTimeout)
}

// ConnectDialing is Connect with connections made by dial, to reach
// servers in another network namespace, say.
func ConnectDialing(servers []string, dial zk.Dialer) (*zk.Conn, error) {
	conn, events, err := zk.Connect(servers, 30*time.Second, zk.WithLogInfo(false), zk.WithDialer(dial))
	if err != nil {
		return nil, err
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go func() {
					for range events {
					}
				}()
				return conn, nil
			}
		case <-timeout:
			conn.Close()
			return nil, fmt.Errorf("bench: no session with %v", servers)
		}
	}
}

// Run measures one operation.
func Run(ctx context.Context, o Options) (Result, error) {
	if err := o.defaults(); err != nil {
		return Result{}, err
	}
	conns := make([]*zk.Conn, o.Clients)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range conns {
		c, err := Connect(o.Servers)
		if err != nil {
			return Result{}, err
		}
		conns[i] = c
	}
	root := fmt.Sprintf("%s/%s-%d", o.Prefix, o.Op, time.Now().UnixNano())
	if err := prepare(conns[0], o, root); err != nil {
		return Result{}, err
	}
	defer cleanup(conns[0], root)

	data := make([]byte, o.DataSize)
	begin := time.Now()
	measured := begin.Add(o.Warmup)
	var end time.Time
	if o.Duration > 0 {
		end = measured.Add(o.Duration)
	}
	cpu := startCPUWindow(o.ServerCPU, measured)
	var issued atomic.Int64
	samples, errs, longest := closedLoop(ctx, o.Clients, measured, end, func(i int) (func() error, func()) {
		w := &worker{c: conns[i], o: &o, root: root, data: data, id: i, rng: rand.New(rand.NewPCG(uint64(i), 7))}
		return func() error {
			if o.Requests > 0 && issued.Add(1) > int64(o.Requests) {
				return errStop
			}
			return w.do()
		}, nil
	})
	r := summarize(o, samples, errs, time.Since(measured))
	r.Longest = float64(longest.Microseconds()) / 1000
	var err error
	r.CPUPerOp, err = cpu.perOp(r.Requests)
	return r, err
}

// cpuWindow reads the servers' CPU time when the measured part starts and
// when it ends.
type cpuWindow struct {
	read  func() (float64, error)
	start chan float64
	err   chan error
}

// startCPUWindow reads read at the moment at; a nil read measures nothing.
func startCPUWindow(read func() (float64, error), at time.Time) *cpuWindow {
	m := &cpuWindow{read: read, start: make(chan float64, 1), err: make(chan error, 1)}
	if read == nil {
		return m
	}
	go func() {
		time.Sleep(time.Until(at)) // waits for the end of the warmup
		v, err := read()
		m.start <- v
		m.err <- err
	}()
	return m
}

// perOp returns the CPU microseconds per request since the start.
func (m *cpuWindow) perOp(requests int) (float64, error) {
	if m.read == nil || requests == 0 {
		return 0, nil
	}
	start, err := <-m.start, <-m.err
	end, err2 := m.read()
	if err := errors.Join(err, err2); err != nil {
		return 0, fmt.Errorf("bench: server CPU: %w", err)
	}
	return (end - start) * 1e6 / float64(requests), nil
}

// errStop ends a client's loop.
var errStop = errors.New("stop")

// stallGrace is how much longer than its window a run goes on when no
// measured call has succeeded yet: a server that paused through the whole
// window (an election, a slow fsync) then reports a low throughput, not
// none.
const stallGrace = 30 * time.Second

// closedLoop runs clients goroutines, client i calling the do that
// client(i) returns back to back until end (never, if zero; past end
// until a measured call succeeds, at most stallGrace), ctx ends or do
// returns errStop, then calling done (if not nil). It returns the latencies
// of the calls that succeeded and their errors by code, both counting only
// calls started after measured.
func closedLoop(ctx context.Context, clients int, measured, end time.Time,
	client func(i int) (do func() error, done func())) (samples []time.Duration, errs map[string]int, longest time.Duration) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
		ok atomic.Bool // a measured call succeeded
	)
	errs = map[string]int{}
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			do, done := client(i)
			if done != nil {
				defer done()
			}
			var local []time.Duration
			var localLongest time.Duration
			localErrs := map[string]int{}
			for ctx.Err() == nil {
				t0 := time.Now()
				if !end.IsZero() && t0.After(end) && (ok.Load() || t0.After(end.Add(stallGrace))) {
					break
				}
				err := do()
				if err == errStop {
					break
				}
				d := time.Since(t0)
				if t0.Add(d).After(measured) {
					localLongest = max(localLongest, d)
				}
				if t0.Before(measured) {
					continue
				}
				if err != nil {
					localErrs[errName(err)]++
					continue
				}
				local = append(local, d)
				ok.Store(true)
			}
			mu.Lock()
			samples = append(samples, local...)
			longest = max(longest, localLongest)
			for k, v := range localErrs {
				errs[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return samples, errs, longest
}

func errName(err error) string {
	var code proto.Code
	if errors.As(err, &code) {
		return codeName(code)
	}
	for _, zc := range zkCodes {
		if errors.Is(err, zc.err) {
			return codeName(zc.code)
		}
	}
	// go-zookeeper reports codes it does not know as "unknown error: N".
	if n, ok := strings.CutPrefix(err.Error(), "unknown error: "); ok {
		if c, perr := strconv.ParseInt(n, 10, 32); perr == nil {
			return codeName(proto.Code(c))
		}
	}
	return strings.TrimPrefix(err.Error(), "zk: ")
}

func codeName(c proto.Code) string {
	if s := strings.TrimPrefix(c.Error(), "zk: "); !strings.HasPrefix(s, "error ") {
		return s
	}
	return fmt.Sprintf("code %d", int32(c))
}

// zkCodes maps go-zookeeper's error values back to the codes the server sent.
var zkCodes = []struct {
	err  error
	code proto.Code
}{
	{zk.ErrAPIError, proto.ErrAPIError}, {zk.ErrNoNode, proto.ErrNoNode}, {zk.ErrNoAuth, proto.ErrNoAuth},
	{zk.ErrBadVersion, proto.ErrBadVersion}, {zk.ErrNoChildrenForEphemerals, proto.ErrNoChildrenForEphemerals},
	{zk.ErrNodeExists, proto.ErrNodeExists}, {zk.ErrNotEmpty, proto.ErrNotEmpty},
	{zk.ErrSessionExpired, proto.ErrSessionExpired}, {zk.ErrInvalidACL, proto.ErrInvalidACL},
	{zk.ErrAuthFailed, proto.ErrAuthFailed}, {zk.ErrSessionMoved, proto.ErrSessionMoved},
	{zk.ErrReconfigDisabled, proto.ErrReconfigDisabled}, {zk.ErrBadArguments, proto.ErrBadArguments},
}

func summarize(o Options, samples []time.Duration, errs map[string]int, elapsed time.Duration) Result {
	slices.Sort(samples)
	pct := func(p float64) float64 {
		if len(samples) == 0 {
			return 0
		}
		i := int(p * float64(len(samples)-1))
		return float64(samples[i].Microseconds()) / 1000
	}
	r := Result{Op: o.Op, Clients: o.Clients, Requests: len(samples), Seconds: elapsed.Seconds(),
		P50: pct(0.50), P90: pct(0.90), P99: pct(0.99), P999: pct(0.999), Max: pct(1), Errors: errs}
	if elapsed > 0 {
		r.Throughput = float64(len(samples)) / elapsed.Seconds()
	}
	if len(errs) == 0 {
		r.Errors = nil
	}
	return r
}

// prepare creates the benchmark's nodes.
func prepare(c *zk.Conn, o Options, root string) error {
	acl := zk.WorldACL(zk.PermAll)
	for _, p := range []string{o.Prefix, root} {
		if _, err := c.Create(p, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("bench: create %s: %w", p, err)
		}
	}
	n := 0
	switch o.Op {
	case "get", "set", "exists":
		n = o.KeySpace
	case "children":
		n = o.Width
	case "insert":
		for _, p := range []string{root + "/blocks", root + "/block_numbers", root + "/log", root + "/parts", root + "/temp"} {
			if _, err := c.Create(p, nil, 0, acl); err != nil {
				return err
			}
		}
	}
	return fill(c, root, n, make([]byte, o.DataSize))
}

// fillBatch is how many creates one multi of fill carries; fillWidth how
// many multis are in flight.
const fillBatch, fillWidth = 100, 16

// fill creates root/k0..k(n-1) in pipelined multis of fillBatch creates.
func fill(c *zk.Conn, root string, n int, data []byte) error {
	acl := zk.WorldACL(zk.PermAll)
	err := parallel((n+fillBatch-1)/fillBatch, fillWidth, func(b int) error {
		ops := make([]any, 0, fillBatch)
		for i := b * fillBatch; i < min(n, (b+1)*fillBatch); i++ {
			ops = append(ops, &zk.CreateRequest{Path: fmt.Sprintf("%s/k%d", root, i), Data: data, Acl: acl})
		}
		_, err := c.Multi(ops...)
		return err
	})
	if err != nil {
		return fmt.Errorf("bench: fill %s: %w", root, err)
	}
	return nil
}

// Fill creates n nodes of size bytes under root (which must exist), for
// memory measurements.
func Fill(c *zk.Conn, root string, n, size int) error { return fill(c, root, n, make([]byte, size)) }

// cleanup removes the benchmark's nodes (best effort): leaves in pipelined
// multis of deletes, and a batch that meets a node with children one node
// at a time, depth first.
func cleanup(c *zk.Conn, root string) {
	kids, _, _ := c.Children(root)
	_ = parallel((len(kids)+fillBatch-1)/fillBatch, fillWidth, func(b int) error {
		batch := kids[b*fillBatch : min(len(kids), (b+1)*fillBatch)]
		ops := make([]any, len(batch))
		for i, k := range batch {
			ops[i] = &zk.DeleteRequest{Path: root + "/" + k, Version: -1}
		}
		if _, err := c.Multi(ops...); err != nil {
			for _, k := range batch {
				cleanup(c, root+"/"+k)
			}
		}
		return nil
	})
	c.Delete(root, -1)
}

// parallel calls f(0), …, f(n-1) with at most width calls in flight and
// returns the first error.
func parallel(n, width int, f func(i int) error) error {
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		sem   = make(chan struct{}, width)
	)
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(i); err != nil {
				once.Do(func() { first = err })
			}
		}()
	}
	wg.Wait()
	return first
}

// worker issues one client's requests.
type worker struct {
	c    *zk.Conn
	o    *Options
	root string
	data []byte
	id   int
	n    int
	rng  *rand.Rand
}

func (w *worker) key() string { return fmt.Sprintf("%s/k%d", w.root, w.rng.IntN(w.o.KeySpace)) }

func (w *worker) do() error {
	acl := zk.WorldACL(zk.PermAll)
	w.n++
	switch w.o.Op {
	case "create":
		_, err := w.c.Create(fmt.Sprintf("%s/c%d-%d", w.root, w.id, w.n), w.data, 0, acl)
		return err
	case "set":
		_, err := w.c.Set(w.key(), w.data, -1)
		return err
	case "get":
		_, _, err := w.c.Get(w.key())
		return err
	case "exists":
		_, _, err := w.c.Exists(w.key())
		return err
	case "children":
		_, _, err := w.c.Children(w.root)
		return err
	case "multi":
		ops := make([]any, w.o.MultiOps)
		for i := range ops {
			ops[i] = &zk.CreateRequest{Path: fmt.Sprintf("%s/m%d-%d-%d", w.root, w.id, w.n, i), Data: w.data, Acl: acl}
		}
		_, err := w.c.Multi(ops...)
		return err
	case "insert":
		return w.insert(acl)
	}
	return fmt.Errorf("bench: unknown op %q", w.o.Op)
}

// insert is ClickHouse's INSERT pattern: the dedup check with an
// ephemeral-sequential lock, an ephemeral-sequential block number, then
// the multi that commits the part and a log entry.
func (w *worker) insert(acl []zk.ACL) error {
	block := fmt.Sprintf("%s/blocks/b%d-%d", w.root, w.id, w.n)
	if _, err := w.c.Multi(
		&zk.CreateRequest{Path: block, Data: w.data, Acl: acl},
		&zk.DeleteRequest{Path: block, Version: -1},
		&zk.CreateRequest{Path: w.root + "/temp/abandonable_lock-", Acl: acl, Flags: zk.FlagEphemeral | zk.FlagSequence},
	); err != nil {
		return err
	}
	num, err := w.c.Create(w.root+"/block_numbers/block-", nil, zk.FlagEphemeral|zk.FlagSequence, acl)
	if err != nil {
		return err
	}
	part := fmt.Sprintf("%s/parts/p%d-%d", w.root, w.id, w.n)
	_, err = w.c.Multi(
		&zk.CreateRequest{Path: part, Data: w.data, Acl: acl},
		&zk.CreateRequest{Path: part + "/checksums", Data: w.data, Acl: acl},
		&zk.CreateRequest{Path: part + "/columns", Data: w.data, Acl: acl},
		&zk.CreateRequest{Path: block, Data: []byte(num), Acl: acl},
		&zk.CreateRequest{Path: w.root + "/log/log-", Data: w.data, Acl: acl, Flags: zk.FlagSequence},
		&zk.DeleteRequest{Path: num, Version: -1},
	)
	return err
}

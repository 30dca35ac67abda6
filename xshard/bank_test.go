package xshard_test

// The bank under a nemesis: 3 shards × 3 members hold accounts; concurrent
// clients move money between accounts on different shards with
// version-checked cross-shard transactions while a nemesis kills, restarts
// and isolates members (leaders mostly) and skews members' wall clocks,
// forwards and backwards; on node processes in network namespaces it also
// pauses them (SIGSTOP), drops what one sends to another, one way, and
// holds it back (a delay of 20 to 400 ms, one way or both).
// After the faults stop and everything is healed:
//
//   - pending sets (records and locks) drain on every member within a bound;
//   - every member of a shard has the same state;
//   - the total is conserved and no account is negative;
//   - no transfer is visible on one shard and not the other (each transfer
//     creates a marker node on both of its shards);
//   - every acknowledged commit is present, every refused one absent, and
//     each account's history is the chain of committed transfers on it;
//   - the client history (transfers, and reads behind a sync) is
//     linearizable (porcupine), transfers whose outcome the client never
//     learnt recorded as unknown: they may or may not have happened.
//
// Retries (issue 38): each client is a digest identity of its own, and
// about a third of its transfers (a stream of the seed of their own,
// drawRetry) are sent again with the same id and ops from other
// connections of the same identity, from 127.0.0.2 on in-process
// clusters: after the first answer, whatever it was; at the same time as
// the first sending; or after a first sending whose connection drops
// right after the request left (the router sends it again on a new
// connection: a reconnect between prepare and commit). Every answer that
// tells (committed, failed) must agree, no sending of the same ops may
// be refused, and the transfer is one operation of the history, from the
// first call to the first answer that told. Some decided transfers are
// sent again at once with the same id and other ops (one more moved),
// which must be refused (ErrBadArguments) whether the shards still hold
// the transaction or only remember it, and some with the same ops by
// another identity, which must be refused (NoAuth) or told the outcome.
// The setup's multi is sent again through lost connections, and a try
// that committed unanswered counts as the setup (setupShard).
//
// Knobs (environment):
//
//	XKEEPER_SEED=n          first seed (default: from the clock); a run given one skips the
//	                        regression seeds (it reproduces that seed)
//	XKEEPER_BANK_BUDGET=dur how long each bank test runs seeds, n, n+1, ..., starting no seed
//	                        that would end past it (default 30s; 0 with -short: one seed)
//	XKEEPER_BANK_SEEDS=n    run exactly n seeds instead, whatever the budget
//	XKEEPER_BANK_FAULT=dur  how long the nemesis runs per seed (default 15s, 8s with -short)
//	XKEEPER_BANK_NEMESIS=k,k  only these faults (default all the cluster can have): kill-leader,
//	                        kill-any, isolate-leader, clock-any, clock-leader, quorum-loss,
//	                        pause-leader, one-way, delay
//
// Every seed that ever failed runs first, before the budget's (bankRegressions,
// bankseeds_test.go, says how to add one). Each seed run is logged (go test -v).
// Thousands of seeds: XKEEPER_BANK_BUDGET=2h XKEEPER_BANK_FAULT=5s
// go test -timeout 0 -count=1 -run TestBank ./xshard/ (the run stops at
// the first failing seed). A failing seed prints the command that runs it
// again. The nemesis and the clients draw every choice from the seed;
// thread timing still varies, so a seed reproduces a schedule of faults and
// requests, not an interleaving.

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

const (
	bankShards       = 3
	bankAcctPer      = 3 // accounts per shard
	bankAccts        = bankShards * bankAcctPer
	bankInitial      = 100
	bankClients      = 6
	bankOpsPerClient = 600 // transfers per client at most; the run's time bounds it first
	bankTxTimeout    = 10 * time.Second
	bankMaxSkew      = 3 * time.Second
)

func TestBank(t *testing.T) {
	fault := 15 * time.Second
	if testing.Short() {
		fault = 8 * time.Second
	}
	bankSeeds(t, fault, func(t *testing.T) bankCluster { return inProcessBank(t, 0) })
}

// TestBankOnNodes is the bank on three nodes, each hosting a member of
// every shard on one peer port: the nemesis kills, restarts and isolates
// whole nodes (every shard loses a member at once) and jumps their clocks.
func TestBankOnNodes(t *testing.T) {
	bankSeeds(t, 10*time.Second, func(t *testing.T) bankCluster { return inProcessBank(t, 3) })
}

// TestBankOnNodeProcesses is the bank on three `xkeeper serve --node`
// processes, each in a network namespace of its own: besides SIGKILL and
// restart and cutting a node off, the nemesis pauses a leader's node with
// SIGSTOP for longer than the election timeout and lets it go on with
// SIGCONT (it wakes up believing it leads, with its connections open and
// its old messages in flight), and drops all or some of what one node
// sends to another while the other way still flows (a node that hears its
// leader but is not heard), or holds it back by 20 to 400 ms, one way or
// both (testenv.Net.Delay: past the leader lease at the longest). Clocks
// stay true: they are the machine's.
func TestBankOnNodeProcesses(t *testing.T) {
	bankSeeds(t, 12*time.Second, processBank)
}

// --- the model ---

type acctState struct {
	Bal int64
	Ver int32
}

type bankState [bankAccts]acctState

type bankStatus int

const (
	txOK bankStatus = iota
	txFailed
	txUnknown
)

func (s bankStatus) String() string { return [...]string{"ok", "failed", "unknown"}[s] }

// bankInput is a read of one account, or a transfer that sets both
// accounts to new balances if their versions are still the ones read.
type bankInput struct {
	Read           bool
	Acct           int // read
	From, To       int
	VerFrom, VerTo int32
	NewFrom, NewTo int64
	ID             string
	Client         int
	Coord          string // the coordinating shard
}

type bankOutput struct {
	Bal    int64 // read
	Ver    int32 // read
	Status bankStatus
}

func bankStep(state, input, output any) []any {
	st := state.(bankState)
	in, out := input.(bankInput), output.(bankOutput)
	if in.Read {
		if st[in.Acct] == (acctState{out.Bal, out.Ver}) {
			return []any{st}
		}
		return nil
	}
	next, can := st, st[in.From].Ver == in.VerFrom && st[in.To].Ver == in.VerTo
	if can {
		next[in.From] = acctState{in.NewFrom, in.VerFrom + 1}
		next[in.To] = acctState{in.NewTo, in.VerTo + 1}
	}
	switch out.Status {
	case txOK:
		if can {
			return []any{next}
		}
		return nil
	case txFailed: // refused, for whatever reason: nothing changed
		return []any{st}
	default: // unknown: either
		if can {
			return []any{st, next}
		}
		return []any{st}
	}
}

var bankModel = (&porcupine.NondeterministicModel{
	Init: func() []any {
		var st bankState
		for i := range st {
			st[i] = acctState{Bal: bankInitial}
		}
		return []any{st}
	},
	Step: bankStep,
	Hash: func(state any) uint64 {
		h := fnv.New64a()
		fmt.Fprint(h, state.(bankState))
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(bankInput), output.(bankOutput)
		if in.Read {
			return fmt.Sprintf("read(%d) → %d v%d", in.Acct, out.Bal, out.Ver)
		}
		return fmt.Sprintf("transfer %d(v%d→%d) %d(v%d→%d) %s → %v", in.From, in.VerFrom, in.NewFrom, in.To, in.VerTo, in.NewTo, in.ID[:8], out.Status)
	},
	DescribeState: func(state any) string { return fmt.Sprint(state.(bankState)) },
}).ToModel()

// --- the run ---

func acctShard(i int) string { return string(rune('a' + i/bankAcctPer)) }
func acctPath(i int) string  { return fmt.Sprintf("/bank/acct-%d", i) }
func markerDir(client int) string {
	return fmt.Sprintf("/tx-c%d", client)
}

// skews is every member's wall clock offset.
type skews struct {
	mu sync.Mutex
	m  map[string]time.Duration
}

func (s *skews) set(id string, d time.Duration) {
	s.mu.Lock()
	s.m[id] = d
	s.mu.Unlock()
}

func (s *skews) clock(id string) func() time.Time {
	return func() time.Time {
		s.mu.Lock()
		d := s.m[id]
		s.mu.Unlock()
		return time.Now().Add(d)
	}
}

// bankCluster is the cluster under the bank: its file, its leaders, the
// faults the nemesis injects, and a look at each member once they stop.
type bankCluster struct {
	cfg    *config.Cluster
	leader func(shard string) string // the leading member's id, or ""
	faults faults
	// records counts the transaction records (and locks, where they can
	// be seen) on every member of a shard.
	records func(shard string) int
	// digest describes a member's state: members that agree give the same.
	digest func(member string) string
	// elsewhere dials from another source address than the clients'
	// own, for their retries from elsewhere; nil: the same address.
	elsewhere client.Dialer
}

// inProcessBank starts the bank's shards in this process, on nodes if
// nodes > 0, each member (or node) with a clock the nemesis can move.
func inProcessBank(t *testing.T, nodes int) bankCluster {
	sk := &skews{m: map[string]time.Duration{}}
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: bankShards, Members: 3, Nodes: nodes, MemberClock: sk.clock})
	f := faultsOf(c)
	f.skew = sk.set
	return bankCluster{cfg: c.Config, leader: c.Leader, faults: f,
		records:   func(shard string) int { return records(c, shard) },
		digest:    func(member string) string { return digest(c.Member(member).Replica.View) },
		elsewhere: loopback2}
}

// processBank starts the bank's shards on three node processes, each in a
// network namespace of its own, and looks at each member through its own
// client port.
func processBank(t *testing.T) bankCluster {
	pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Shards: bankShards, Nodes: 3, NetNS: true})
	t.Cleanup(func() { keepNodeLogs(t, pc) })
	f := faults{kill: pc.Kill, restart: pc.Start, isolate: pc.Net.Isolate, running: pc.Running, pause: pc.Pause,
		unitOf: func(member string) string {
			_, m, _ := pc.Config.Member(member)
			return m.Node
		},
		oneWay: pc.Net.DropOneWay, delay: pc.Net.Delay, healNet: pc.Net.Heal}
	for _, n := range pc.Config.Nodes {
		f.units = append(f.units, n.Name)
	}
	conns := map[string]*client.Client{}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	// member connects to one member alone, once; the bank asks only after
	// the faults, from its one goroutine.
	member := func(id string) (*client.Client, error) {
		if c := conns[id]; c != nil {
			return c, nil
		}
		_, m, err := pc.Config.Member(id)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := client.Connect(ctx, []string{m.ClientAddr})
		if err == nil {
			conns[id] = c
		}
		return c, err
	}
	return bankCluster{cfg: pc.Config, leader: pc.Leader, faults: f,
		records: func(shard string) int {
			n := 0
			sh, _ := pc.Config.Shard(shard)
			for _, m := range sh.Members {
				c, err := member(m.ID)
				var list proto.XListResponse
				if err == nil {
					_, err = c.Do(context.Background(), proto.OpXList, proto.Empty{}, &list)
				}
				if err != nil {
					return -1 // not known
				}
				n += len(list.Records)
			}
			return n
		},
		digest: func(id string) string {
			c, err := member(id)
			if err != nil {
				return err.Error()
			}
			return clientDigest(c)
		}}
}

type bank struct {
	t         *testing.T
	cfg       *config.Cluster
	elsewhere client.Dialer // bankCluster.elsewhere
	start     time.Time
	stop      chan struct{}
	bankRetries

	mu   sync.Mutex
	hist []porcupine.Operation
}

func (b *bank) now() int64 { return int64(time.Since(b.start)) }

func (b *bank) record(client int, in bankInput, out bankOutput, call, ret int64) {
	b.mu.Lock()
	b.hist = append(b.hist, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
	b.mu.Unlock()
}

func runBank(t *testing.T, seed int64, fault time.Duration, c bankCluster) {
	ft := c.faults
	log := testenv.TestLogger(t)
	setup := xshard.NewRouter(c.cfg, log)
	defer setup.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for s := range bankShards {
		require.NoError(t, setupShard(ctx, setup, string(rune('a'+s)), bankSetupOps(s), sendMulti))
	}

	b := &bank{t: t, cfg: c.cfg, elsewhere: c.elsewhere, start: time.Now(), stop: make(chan struct{})}
	var wg sync.WaitGroup
	counts := make([][3]int, bankClients)
	for k := range bankClients {
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(k+1)))
		retries := rand.New(rand.NewPCG(uint64(seed), uint64(bankClients+k+1)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[k] = b.client(k, rng, retries)
		}()
	}
	clientsDone := make(chan struct{})
	go func() { wg.Wait(); close(clientsDone) }()
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { close(b.stop) }) }
	defer func() { stop(); <-clientsDone }() // also when the test fails early

	nemesis(t, c, rand.New(rand.NewPCG(uint64(seed), 0)), fault, clientsDone)
	ft.heal()
	stop()
	<-clientsDone
	var tot [3]int
	for _, n := range counts {
		for i := range tot {
			tot[i] += n[i]
		}
	}
	b.mu.Lock()
	var lat []time.Duration
	reads := 0
	for _, op := range b.hist {
		if op.Input.(bankInput).Read {
			reads++
		} else {
			lat = append(lat, time.Duration(op.Return-op.Call))
		}
	}
	b.mu.Unlock()
	slices.Sort(lat)
	if len(lat) > 0 {
		t.Logf("seed %d: transfers ok %d, failed %d, unknown %d; latency p50 %v p99 %v max %v; %d reads",
			seed, tot[txOK], tot[txFailed], tot[txUnknown], lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1], reads)
	}
	t.Logf("seed %d: %v", seed, &b.bankRetries)
	if b.retries[retryLoseReply].Load() >= 5 && b.dropped.Load() == 0 {
		t.Errorf("%d transfers meant to lose their answer, and no connection dropped after sending one", b.retries[retryLoseReply].Load())
	}

	// Pending sets drain.
	drainStart := time.Now()
	deadline := drainStart.Add(40 * time.Second)
	empty := func() bool {
		for _, sh := range c.cfg.Shards {
			if c.records(sh.Name) != 0 { // -1: not known
				return false
			}
		}
		return true
	}
	for !empty() {
		if time.Now().After(deadline) {
			for _, sh := range c.cfg.Shards {
				for _, m := range sh.Members {
					for line := range strings.Lines(c.digest(m.ID)) {
						if strings.HasPrefix(line, "record ") || strings.HasPrefix(line, "zxid ") {
							t.Logf("%s: %s", m.ID, strings.TrimSpace(line))
						}
					}
				}
			}
			t.Fatalf("pending sets not empty 40s after the faults stopped")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("pending sets drained in %v", time.Since(drainStart).Round(time.Millisecond))

	// Replicas agree.
	deadline = time.Now().Add(20 * time.Second)
	for _, sh := range c.cfg.Shards {
		for {
			var digests []string
			for _, m := range sh.Members {
				digests = append(digests, c.digest(m.ID))
			}
			if slices.Equal(digests, slices.Repeat(digests[:1], len(digests))) {
				break
			}
			if time.Now().After(deadline) {
				for i, m := range sh.Members {
					t.Logf("member %s:\n%s", m.ID, digests[i])
				}
				t.Fatalf("members of shard %s disagree", sh.Name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	drained := b.now()

	// The final state, from any member (they agree).
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	final, markers, problems := finalState(ctx, setup)
	if len(problems) > 0 {
		t.Fatal(strings.Join(problems, "\n"))
	}
	t.Logf("final balances %v", final)

	// Conservation and no negative balance.
	var sum int64
	for i, a := range final {
		sum += a.Bal
		if a.Bal < 0 {
			t.Errorf("account %d is negative: %d", i, a.Bal)
		}
	}
	if sum != bankAccts*bankInitial {
		t.Errorf("total %d, want %d", sum, bankAccts*bankInitial)
	}

	// Markers: on both shards of a committed transfer, on neither of a
	// refused one, never on one only.
	b.mu.Lock()
	hist := slices.Clone(b.hist)
	b.mu.Unlock()
	ours := map[string]bool{}
	type step struct {
		ver int32
		bal int64
		id  string
	}
	chains := make([][]step, bankAccts)
	var unknowns []bankInput
	for i := range hist {
		op := &hist[i]
		in, out := op.Input.(bankInput), op.Output.(bankOutput)
		if in.Read {
			continue
		}
		key := fmt.Sprintf("%d/%s", in.Client, in.ID)
		ours[key] = true
		onFrom, onTo := markers[acctShard(in.From)][key], markers[acctShard(in.To)][key]
		if onFrom != onTo {
			t.Errorf("transfer %s (%v) visible on one shard only: %s %v, %s %v", in.ID, out.Status, acctShard(in.From), onFrom, acctShard(in.To), onTo)
		}
		committed := onFrom && onTo
		switch {
		case out.Status == txOK && !committed:
			t.Errorf("acknowledged transfer %s missing", in.ID)
		case out.Status == txFailed && (onFrom || onTo):
			t.Errorf("refused transfer %s applied", in.ID)
		case out.Status == txUnknown:
			unknowns = append(unknowns, in)
			op.Return = drained // it has settled by now, one way or the other
		}
		if committed {
			chains[in.From] = append(chains[in.From], step{in.VerFrom, in.NewFrom, in.ID})
			chains[in.To] = append(chains[in.To], step{in.VerTo, in.NewTo, in.ID})
		}
	}
	for sh, set := range markers {
		for key := range set {
			if !ours[key] {
				t.Errorf("shard %s holds marker %s of no transfer", sh, key)
			}
		}
	}
	// Each account's committed transfers form one chain of versions, and
	// the last one's balance is the account's.
	for i, ch := range chains {
		sort.Slice(ch, func(x, y int) bool { return ch[x].ver < ch[y].ver })
		want := acctState{bankInitial, 0}
		for j, s := range ch {
			if s.ver != int32(j) {
				t.Errorf("account %d: committed transfers at versions %v: lost or doubled update at %d (%s)", i, ch, j, s.id)
				break
			}
			want = acctState{s.bal, s.ver + 1}
		}
		if final[i] != want {
			t.Errorf("account %d is %+v, its committed transfers give %+v", i, final[i], want)
		}
	}
	// The coordinator remembers what became of a transfer the client never
	// heard about, and it matches the markers.
	for _, in := range unknowns {
		coord := in.Coord
		st, err := xshard.Outcome(ctx, setup, coord, in.ID)
		if err != nil {
			t.Errorf("outcome of %s: %v", in.ID, err)
			continue
		}
		key := fmt.Sprintf("%d/%s", in.Client, in.ID)
		if committed := markers[acctShard(in.From)][key]; (st == proto.XCommitted) != committed {
			t.Errorf("transfer %s: coordinator %s says %v, markers say committed=%v", in.ID, coord, st, committed)
		}
	}
	if t.Failed() {
		return
	}

	// Linearizability, the final state read last.
	at := drained + 1
	for i, a := range final {
		hist = append(hist, porcupine.Operation{ClientId: bankClients, Input: bankInput{Read: true, Acct: i},
			Output: bankOutput{Bal: a.Bal, Ver: a.Ver}, Call: at, Return: at + 1})
		at += 2
	}
	checkStart := time.Now()
	res, info := porcupine.CheckOperationsVerbose(bankModel, hist, 60*time.Second)
	t.Logf("porcupine: %v over %d operations in %v", res, len(hist), time.Since(checkStart).Round(time.Millisecond))
	switch res {
	case porcupine.Illegal:
		f, err := os.CreateTemp("", "xkeeper-bank-*.html")
		if err == nil {
			porcupine.Visualize(bankModel, info, f)
			f.Close()
			t.Errorf("history not linearizable; visualization in %s", f.Name())
		} else {
			t.Errorf("history not linearizable")
		}
	case porcupine.Unknown:
		// Histories of a seed check in milliseconds; a minute means the
		// search exploded, which is no proof of anything.
		t.Errorf("porcupine timed out after a minute: linearizability not established")
	}
}

// client transfers money until it has done its share or the run stops;
// it returns how many transfers were ok, failed and unknown. Some of its
// transfers are retried with the same id (drawRetry, from retries, a
// stream of the seed of its own so that the transfers drawn from rng are
// the seed's whether retried or not).
func (b *bank) client(k int, rng, retries *rand.Rand) (n [3]int) {
	rs := newBankRouters(b, k)
	defer rs.close()
	r := rs.own
	for range bankOpsPerClient {
		select {
		case <-b.stop:
			return n
		default:
		}
		from := rng.IntN(bankAccts)
		to := rng.IntN(bankAccts - bankAcctPer)
		if acctShard(to) >= acctShard(from) {
			to += bankAcctPer // an account on another shard
		}
		amount := 1 + rng.Int64N(30)
		coord := acctShard(from)
		if rng.IntN(2) == 0 {
			coord = acctShard(to)
		}
		bf, vf, ok := b.read(r, k, from)
		if !ok {
			b.pause(rng)
			continue
		}
		bt, vt, ok := b.read(r, k, to)
		if !ok {
			b.pause(rng)
			continue
		}
		amount = min(amount, bf)
		if amount == 0 {
			continue
		}
		id := uuid.Must(uuid.NewRandomFromReader(rngReader{rng})).String()
		in := bankInput{From: from, To: to, VerFrom: vf, VerTo: vt, NewFrom: bf - amount, NewTo: bt + amount,
			ID: id, Client: k, Coord: coord}
		// Some clients give up early, so some outcomes stay unknown.
		timeout := bankTxTimeout
		if rng.IntN(3) == 0 {
			timeout = time.Duration(100+rng.IntN(2000)) * time.Millisecond
		}
		out, call, ret := b.transfer(rs, drawRetry(retries), in, timeout)
		n[out.Status]++
		b.record(k, in, out, call, ret)
		b.pause(rng)
	}
	return n
}

func (b *bank) pause(rng *rand.Rand) {
	select {
	case <-b.stop:
	case <-time.After(time.Duration(5+rng.IntN(40)) * time.Millisecond):
	}
}

// read reads an account behind a sync, so the answer is no older than the
// call, and records it.
func (b *bank) read(r *xshard.Router, k, acct int) (int64, int32, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cl, err := r.Client(ctx, acctShard(acct))
	if err != nil {
		return 0, 0, false
	}
	call := b.now()
	if _, err := cl.Sync(ctx, acctPath(acct)); err != nil {
		return 0, 0, false
	}
	data, st, err := cl.Get(ctx, acctPath(acct))
	ret := b.now()
	if err != nil {
		return 0, 0, false // a refused read (locked, lost connection) tells nothing
	}
	bal, perr := strconv.ParseInt(string(data), 10, 64)
	if perr != nil {
		b.t.Errorf("%s = %q", acctPath(acct), data)
		return 0, 0, false
	}
	b.record(k, bankInput{Read: true, Acct: acct}, bankOutput{Bal: bal, Ver: st.Version}, call, ret)
	return bal, st.Version, true
}

// transferReqs is transfer in's ops on its two shards: each account set
// to its new balance if its version is still the one read, and the
// transfer's marker; extra moves that much more (other ops under the
// same id).
func transferReqs(in bankInput, extra int64) []xshard.MultiRequestForShard {
	marker := markerDir(in.Client) + "/" + in.ID
	return []xshard.MultiRequestForShard{
		{Shard: acctShard(in.From), Requests: []proto.MultiOp{
			setData(acctPath(in.From), strconv.FormatInt(in.NewFrom-extra, 10), in.VerFrom), create(marker, "")}},
		{Shard: acctShard(in.To), Requests: []proto.MultiOp{
			setData(acctPath(in.To), strconv.FormatInt(in.NewTo+extra, 10), in.VerTo), create(marker, "")}},
	}
}

type rngReader struct{ r *rand.Rand }

func (r rngReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r.r.Uint32())
	}
	return len(p), nil
}

// keepNodeLogs copies, when the seed failed, the end of each node's log
// and its data directory (Raft logs and snapshots, to read what each member
// applied) out of the test's directory (which goes with the test) and says
// where.
func keepNodeLogs(t *testing.T, pc *testenv.ProcessCluster) {
	if !t.Failed() {
		return
	}
	for _, n := range pc.Config.Nodes {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("xkeeper-%s-%s", strings.ReplaceAll(t.Name(), "/", "_"), n.Name))
		if err := os.WriteFile(path+".log", []byte(pc.Process(n.Name).LogTail(20000)), 0o644); err != nil {
			t.Logf("keep the log of %s: %v", n.Name, err)
			continue
		}
		if err := os.CopyFS(path+"-data", os.DirFS(n.DataDir)); err != nil {
			t.Logf("keep the data of %s: %v", n.Name, err)
		}
		t.Logf("log and data of node %s kept in %s.log and %s-data", n.Name, path, path)
	}
}

// faults is what the nemesis acts on: the members of the cluster, or its
// nodes (each the members it hosts, killed, restarted, isolated, paused
// and with a clock together). skew, pause, oneWay, delay and healNet are
// nil where the cluster cannot have them.
type faults struct {
	units   []string
	unitOf  func(member string) string
	running func(unit string) bool
	kill    func(unit string)
	restart func(unit string)
	isolate func(unit string, on bool)
	skew    func(unit string, d time.Duration)     // moves a unit's wall clock
	pause   func(unit string, on bool)             // SIGSTOP, SIGCONT
	oneWay  func(from, to string, percent int)     // drops what from sends to
	delay   func(from, to string, d time.Duration) // holds back what from sends to
	healNet func()                                 // takes away every drop and delay
}

func faultsOf(c *testenv.Cluster) faults {
	if len(c.Config.Nodes) > 0 {
		f := faults{kill: c.KillNode, restart: c.RestartNode, isolate: c.IsolateNode, running: c.NodeRunning,
			unitOf: func(member string) string {
				_, m, _ := c.Config.Member(member)
				return m.Node
			}}
		for _, n := range c.Config.Nodes {
			f.units = append(f.units, n.Name)
		}
		return f
	}
	f := faults{kill: c.Kill, restart: c.Restart, isolate: c.Isolate, unitOf: func(member string) string { return member },
		running: func(id string) bool { return c.Member(id) != nil }}
	for _, sh := range c.Config.Shards {
		for _, m := range sh.Members {
			f.units = append(f.units, m.ID)
		}
	}
	return f
}

// heal undoes every fault: clocks back to true time (a backwards jump for
// those ahead), every unit going on, running and connected.
func (f faults) heal() {
	for _, u := range f.units {
		if f.skew != nil {
			f.skew(u, 0)
		}
		if f.pause != nil {
			f.pause(u, false)
		}
		if !f.running(u) {
			f.restart(u)
		}
		f.isolate(u, false)
	}
	if f.healNet != nil {
		f.healNet()
	}
}

// nemesis injects faults until its time is up or the clients are done:
// kills and restarts of leaders and other members, isolation of leaders,
// loss of a shard's quorum, and, where the cluster has them, clock jumps
// of members (forwards and backwards), pauses of leaders longer than the
// election timeout, one-way loss between units and delays of what one
// sends to another. One crash, isolation, pause, loss or delay at a time,
// healed before the next; clock skews stay until changed.
func nemesis(t *testing.T, c bankCluster, rng *rand.Rand, d time.Duration, done <-chan struct{}) {
	f := c.faults
	end := time.Now().Add(d)
	sleep := func(min, max time.Duration) bool {
		select {
		case <-done:
			return false
		case <-time.After(min + time.Duration(rng.Int64N(int64(max-min)))):
			return true
		}
	}
	const (
		killLeader = iota
		killAny
		isolateLeader
		clockAny
		clockLeader
		quorumLoss
		pauseLeader
		oneWayLoss
		slowLink
	)
	kinds := []int{killLeader, killLeader, killAny, isolateLeader}
	if f.skew != nil {
		kinds = append(kinds, clockAny, clockLeader)
	}
	kinds = append(kinds, quorumLoss)
	if f.pause != nil {
		kinds = append(kinds, pauseLeader, pauseLeader)
	}
	if f.oneWay != nil {
		kinds = append(kinds, oneWayLoss, oneWayLoss)
	}
	if f.delay != nil {
		kinds = append(kinds, slowLink, slowLink)
	}
	if only := os.Getenv("XKEEPER_BANK_NEMESIS"); only != "" {
		names := []string{"kill-leader", "kill-any", "isolate-leader", "clock-any", "clock-leader",
			"quorum-loss", "pause-leader", "one-way", "delay"}
		want := map[int]bool{}
		for _, name := range strings.Split(only, ",") {
			k := slices.Index(names, strings.TrimSpace(name))
			require.GreaterOrEqual(t, k, 0, "XKEEPER_BANK_NEMESIS: no fault called %q (%s)", name, strings.Join(names, ", "))
			want[k] = true
		}
		kinds = slices.DeleteFunc(kinds, func(k int) bool { return !want[k] })
		require.NotEmpty(t, kinds, "XKEEPER_BANK_NEMESIS=%s: none of these faults can happen in this cluster", only)
	}
	// pair picks two units, the first of them leader half the time.
	pair := func(leader string) (from, to string) {
		from = f.units[rng.IntN(len(f.units))]
		if leader != "" && rng.IntN(2) == 0 {
			from = leader
		}
		to = f.units[rng.IntN(len(f.units))]
		for to == from {
			to = f.units[rng.IntN(len(f.units))]
		}
		return from, to
	}
	for time.Now().Before(end) {
		shard := string(rune('a' + rng.IntN(bankShards)))
		leader := ""
		if id := c.leader(shard); id != "" {
			leader = f.unitOf(id)
		}
		switch kinds[rng.IntN(len(kinds))] {
		case killLeader:
			if leader != "" {
				t.Logf("nemesis: kill leader %s", leader)
				f.kill(leader)
				sleep(200*time.Millisecond, 2*time.Second)
				f.restart(leader)
			}
		case killAny:
			u := f.units[rng.IntN(len(f.units))]
			t.Logf("nemesis: kill %s", u)
			f.kill(u)
			sleep(200*time.Millisecond, 2*time.Second)
			f.restart(u)
		case isolateLeader:
			if leader != "" {
				t.Logf("nemesis: isolate leader %s", leader)
				f.isolate(leader, true)
				sleep(500*time.Millisecond, 3*time.Second)
				f.isolate(leader, false)
			}
		case quorumLoss: // the leader and one more down
			if leader != "" {
				var others []string
				sh, _ := c.cfg.Shard(shard)
				for _, m := range sh.Members {
					if u := f.unitOf(m.ID); u != leader {
						others = append(others, u)
					}
				}
				other := others[rng.IntN(len(others))]
				t.Logf("nemesis: kill %s and %s", leader, other)
				f.kill(leader)
				f.kill(other)
				sleep(500*time.Millisecond, 3*time.Second)
				f.restart(other)
				f.restart(leader)
			}
		case clockAny:
			u := f.units[rng.IntN(len(f.units))]
			skew := time.Duration(rng.Int64N(int64(2*bankMaxSkew))) - bankMaxSkew
			t.Logf("nemesis: clock of %s %+v", u, skew)
			f.skew(u, skew)
		case clockLeader:
			if leader != "" {
				skew := time.Duration(rng.Int64N(int64(2*bankMaxSkew))) - bankMaxSkew
				t.Logf("nemesis: clock of leader %s %+v", leader, skew)
				f.skew(leader, skew)
			}
		case pauseLeader: // well past the election timeout: it wakes up deposed
			if leader != "" {
				t.Logf("nemesis: pause leader %s", leader)
				f.pause(leader, true)
				sleep(time.Second, 4*time.Second)
				f.pause(leader, false)
			}
		case oneWayLoss: // from a leader half the time, all or some
			from, to := pair(leader)
			percent := []int{100, 100, 30}[rng.IntN(3)]
			t.Logf("nemesis: drop %d%% of what %s sends to %s", percent, from, to)
			f.oneWay(from, to, percent)
			sleep(500*time.Millisecond, 3*time.Second)
			f.healNet()
		case slowLink: // from a leader half the time, one way or both; the longest past the leader lease
			from, to := pair(leader)
			lag := []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 400 * time.Millisecond}[rng.IntN(3)]
			both := rng.IntN(2) == 0
			t.Logf("nemesis: delay what %s sends to %s by %v (and back: %v)", from, to, lag, both)
			f.delay(from, to, lag)
			if both {
				f.delay(to, from, lag)
			}
			sleep(500*time.Millisecond, 3*time.Second)
			f.healNet()
		}
		if !sleep(100*time.Millisecond, time.Second) {
			return
		}
	}
}

// finalState reads, behind a sync, every account and every client's
// markers on each shard ("client/id" by shard). A shard's read is tried
// again whole while it fails (a session moved or a connection lost as
// the shards settle) until ctx ends.
func finalState(ctx context.Context, r *xshard.Router) (final bankState, markers map[string]map[string]bool, problems []string) {
	markers = map[string]map[string]bool{}
	for s := range bankShards {
		shard := string(rune('a' + s))
		for {
			set, err := readShard(ctx, r, shard, &final)
			if err == nil {
				markers[shard] = set
				break
			}
			select {
			case <-ctx.Done():
				return final, markers, append(problems, fmt.Sprintf("shard %s: %v", shard, err))
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	for i, a := range final {
		if a.Bal < 0 || a.Ver < 0 {
			problems = append(problems, fmt.Sprintf("%s: %+v", acctPath(i), a))
		}
	}
	return final, markers, problems
}

// readShard reads one shard's accounts into final and returns its markers.
func readShard(ctx context.Context, r *xshard.Router, shard string, final *bankState) (map[string]bool, error) {
	cl, err := r.Client(ctx, shard)
	if err != nil {
		return nil, err
	}
	if _, err := cl.Sync(ctx, "/"); err != nil {
		return nil, err
	}
	for i := range bankAccts {
		if acctShard(i) != shard {
			continue
		}
		data, st, err := cl.Get(ctx, acctPath(i))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", acctPath(i), err)
		}
		bal, err := strconv.ParseInt(string(data), 10, 64)
		if err != nil {
			bal = -1 << 62 // reported by finalState
		}
		final[i] = acctState{bal, st.Version}
	}
	set := map[string]bool{}
	for k := range bankClients {
		kids, err := cl.GetChildren(ctx, markerDir(k))
		if err != nil {
			return nil, fmt.Errorf("children of %s: %w", markerDir(k), err)
		}
		for _, name := range kids {
			set[fmt.Sprintf("%d/%s", k, name)] = true
		}
	}
	return set, nil
}

// digest describes a member's state: every znode with its stat, the
// sessions, the transaction records and locks.
func digest(view func(func(*fsm.State))) string {
	var b strings.Builder
	view(func(st *fsm.State) {
		fmt.Fprintf(&b, "zxid %d time %d locks %d\n", st.Zxid(), st.Time(), st.LockCount())
		for _, r := range st.XRecords() {
			fmt.Fprintf(&b, "record %s %v\n", r.ID, r.Status)
		}
		var sess []string
		for _, s := range st.Sessions() {
			sess = append(sess, fmt.Sprintf("session %x %d %s", s.ID, s.Timeout, s.Owner))
		}
		slices.Sort(sess)
		for _, s := range sess {
			b.WriteString(s + "\n")
		}
		var walk func(path string)
		walk = func(path string) {
			n := st.Node(path)
			if n == nil {
				fmt.Fprintf(&b, "%s missing\n", path)
				return
			}
			fmt.Fprintf(&b, "%s %q %+v\n", path, n.Data(), n.Stat())
			resp, code, _ := st.Read(proto.OpGetChildren, &proto.PathWatchRequest{Path: path}, 0, nil)
			if code != proto.ErrOK {
				fmt.Fprintf(&b, "%s children: %v\n", path, code)
				return
			}
			kids := slices.Clone(resp.(*proto.ChildrenResponse).Children)
			slices.Sort(kids)
			for _, k := range kids {
				if path == "/" {
					walk("/" + k)
				} else {
					walk(path + "/" + k)
				}
			}
		}
		walk("/")
	})
	return b.String()
}

// clientDigest is digest read through a client connected to one member
// alone: its transaction records, then every znode with its stat (what a
// client can see of a member's state).
func clientDigest(c *client.Client) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	var list proto.XListResponse
	if _, err := c.Do(ctx, proto.OpXList, proto.Empty{}, &list); err != nil {
		return err.Error()
	}
	for _, r := range list.Records {
		fmt.Fprintf(&b, "record %s %v\n", r.ID, r.Status)
	}
	var walk func(path string)
	walk = func(path string) {
		data, st, err := c.Get(ctx, path)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", path, err)
			return
		}
		fmt.Fprintf(&b, "%s %q %+v\n", path, data, *st)
		kids, err := c.GetChildren(ctx, path)
		if err != nil {
			fmt.Fprintf(&b, "%s children: %v\n", path, err)
			return
		}
		slices.Sort(kids)
		for _, k := range kids {
			walk(strings.TrimSuffix(path, "/") + "/" + k)
		}
	}
	walk("/")
	return b.String()
}

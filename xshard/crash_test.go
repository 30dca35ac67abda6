package xshard_test

// The crash-point matrix: for each step of the protocol, a fault at that
// point of one transaction, then the check that it ends with one outcome on
// every shard and that the pending sets drain.
//
// One cluster of 3 shards × 3 members serves every case, one after the
// other, each case under its own paths. The transaction sets a
// version-checked node and creates one on each of a (the coordinator), b
// and c; in the ".conflict" cases c's version check fails, so the outcome
// must be failed. A case is
//
//	step.target.fault.client[.conflict]
//
//   - step: the xshard.Step* at which the fault strikes (the first time the
//     transaction passes it);
//   - target: coord (shard a: the coordinator, its own prepare, decision or
//     record) or part (shard b, a participant);
//   - fault: abandon (the driver stops there, as if its process crashed),
//     lost (the message was applied but its reply lost: the driver sends it
//     again), kill (the target shard's leader is killed and restarted; a
//     coordinator's driver is abandoned with it, a participant's reply is
//     lost with it; at a step between messages the driver goes on and
//     meets a shard electing a leader), kill-abandon (a participant's
//     leader is killed and the driver abandoned too), kill-continue (the
//     coordinator member that runs the driver is killed and the driver
//     goes on while it shuts down), hole (the coordinator shard loses its
//     quorum before the prepare round, so its own prepare cannot land;
//     once b holds the transaction pending, the member driving it dies
//     too; then all come back: the participants must learn the outcome
//     from the coordinator shard, which has no record of it);
//   - client: retry (the client keeps retrying with the same id until it
//     gets an answer) or gone (the client gives up at the fault, and the
//     transaction is left to recovery; the outcome is looked up by id).
//     Cleanup steps come after the client's answer and have no client part.
//
// Then, within a bound: no member of any shard holds a record or a lock;
// every member of a shard has the same data; the transaction's effects are
// on every shard or on none; a success answer means all, a refusal none,
// and the outcome looked up by id agrees with the data.
//
// Retries from elsewhere (issue 38): in the retry cases a second client of
// the same caller, on its own connections from another address
// (127.0.0.2), retries the same id as the fault strikes (a client that
// reconnected elsewhere between prepare and commit); once the cluster
// settled, every case with a known outcome is retried once more from that
// address. Each such answer is the outcome looked up by id, and the
// effects are what they were: nothing applies twice.
//
// A failing case prints its name and the seed (XKEEPER_SEED=n reruns it
// with the same choice of the member the client enters by); run one case
// with -run 'TestCrashMatrix/<name>$'.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	crashCoord    = "a" // coordinator
	crashPart     = "b" // the participant faults strike
	crashRefuser  = "c" // the participant that refuses in conflict cases
	crashDeadline = time.Second
	crashSettle   = 30 * time.Second // bound on recovery after a fault
)

var crashShards = []string{crashCoord, crashPart, crashRefuser}

type crashCase struct {
	step     string
	target   string // "coord" or "part"
	fault    string // "abandon", "lost", "kill", "kill-abandon" or "hole"
	client   string // "retry", "gone" or "" (cleanup steps: the client has its answer)
	conflict bool
}

func (k crashCase) String() string {
	parts := []string{k.step, k.target, k.fault}
	if k.client != "" {
		parts = append(parts, k.client)
	}
	if k.conflict {
		parts = append(parts, "conflict")
	}
	return strings.Join(parts, ".")
}

func (k crashCase) shard() string {
	if k.target == "coord" {
		return crashCoord
	}
	return crashPart
}

// crashCases lists the matrix.
func crashCases() []crashCase {
	type point struct {
		step, target string
		perShard     bool // a per-shard step: a reply can be lost there
		answered     bool // the client has its answer before the step
	}
	points := []point{
		{xshard.StepBeforePrepare, "coord", false, false},
		{xshard.StepPrepared, "coord", true, false},
		{xshard.StepPrepared, "part", true, false},
		{xshard.StepAllPrepared, "coord", false, false},
		{xshard.StepAnswered, "coord", false, true},
		{xshard.StepDecisionSent, "coord", true, false},
		{xshard.StepDecisionSent, "part", true, false},
		{xshard.StepBeforeCleanup, "coord", false, true},
		{xshard.StepCleaned, "part", true, true},
		{xshard.StepBeforeOwnDelete, "coord", false, true},
	}
	var out, conflicts []crashCase
	for _, p := range points {
		faults := []string{"abandon", "kill"}
		if p.perShard {
			faults = append(faults, "lost")
		}
		clients := []string{"retry", "gone"}
		if p.answered {
			clients = []string{""}
		}
		for _, f := range faults {
			for _, cl := range clients {
				out = append(out, crashCase{step: p.step, target: p.target, fault: f, client: cl})
			}
		}
		if p.step == xshard.StepAnswered {
			continue // a refused transaction is answered after its decision
		}
		// The same points on the way to a failed outcome: a killed leader,
		// and recovery to finish the job.
		cl := "gone"
		if p.answered {
			cl = ""
		}
		conflicts = append(conflicts, crashCase{step: p.step, target: p.target, fault: "kill", client: cl, conflict: true})
		if p.target == "part" {
			out = append(out, crashCase{step: p.step, target: p.target, fault: "kill-abandon", client: cl})
		}
		if p.target == "coord" && p.perShard {
			out = append(out, crashCase{step: p.step, target: p.target, fault: "kill-continue", client: "retry"})
		}
	}
	// A participant's leader killed while the driver is between messages:
	// the next one meets a shard electing a leader.
	out = append(out,
		crashCase{step: xshard.StepBeforePrepare, target: "part", fault: "kill", client: "retry"},
		crashCase{step: xshard.StepBeforePrepare, target: "part", fault: "kill", client: "gone"},
		crashCase{step: xshard.StepAllPrepared, target: "part", fault: "kill", client: "retry"},
		crashCase{step: xshard.StepAllPrepared, target: "part", fault: "kill", client: "gone"},
		crashCase{step: xshard.StepBeforeCleanup, target: "part", fault: "kill"},
	)
	holes := []crashCase{
		{step: xshard.StepPrepared, target: "part", fault: "hole", client: "retry"},
		{step: xshard.StepPrepared, target: "part", fault: "hole", client: "gone"},
		{step: xshard.StepPrepared, target: "part", fault: "hole", client: "gone", conflict: true},
	}
	return append(append(out, conflicts...), holes...)
}

// crashInjector is the cluster's hook; each case installs its own.
type crashInjector struct {
	mu sync.Mutex
	fn xshard.Hook
}

func (in *crashInjector) hook(step, id, shard string) error {
	in.mu.Lock()
	fn := in.fn
	in.mu.Unlock()
	if fn == nil {
		return nil
	}
	return fn(step, id, shard)
}

func (in *crashInjector) set(fn xshard.Hook) {
	in.mu.Lock()
	in.fn = fn
	in.mu.Unlock()
}

var errCrash = errors.New("crash injected")

func crashSeed(t *testing.T) int64 {
	if s := os.Getenv("XKEEPER_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("XKEEPER_SEED=%q: %v", s, err)
		}
		return n
	}
	return time.Now().UnixNano() % 1_000_000_000
}

func TestCrashMatrix(t *testing.T) {
	seed := crashSeed(t)
	in := &crashInjector{}
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: len(crashShards), Members: 3, XHook: in.hook})
	for i, k := range crashCases() {
		ok := t.Run(k.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(i)))
			runCrashCase(t, c, in, k, i, rng)
		})
		if !ok {
			t.Logf("to rerun: XKEEPER_SEED=%d go test -race -count=1 -run 'TestCrashMatrix/%s$' ./xshard/", seed, k)
		}
	}
}

// crashRouter returns a router whose client enters the coordinator shard by
// a member drawn from rng (the leader or a follower: the member that runs
// the driver).
func crashRouter(t *testing.T, c *testenv.Cluster, rng *rand.Rand) (*xshard.Router, string) {
	cfg := *c.Config
	cfg.Shards = make([]config.Shard, len(c.Config.Shards))
	for i, sh := range c.Config.Shards {
		cfg.Shards[i] = sh
		cfg.Shards[i].Members = append([]config.Member(nil), sh.Members...)
	}
	sh, err := cfg.Shard(crashCoord)
	require.NoError(t, err)
	rng.Shuffle(len(sh.Members), func(i, j int) { sh.Members[i], sh.Members[j] = sh.Members[j], sh.Members[i] })
	return xshard.NewRouter(&cfg, testenv.TestLogger(t), client.WithOrderedServers(), crashCaller).AsListed(), sh.Members[0].ID
}

// crashCaller is the identity of the matrix's clients: a caller without
// one is told apart by its address, and the retries from elsewhere are the
// same caller's.
var crashCaller = client.WithAuth("digest", []byte("crash:retry"))

// elsewhereRouter returns a router whose connections come from another
// address, 127.0.0.2, as the same caller.
func elsewhereRouter(t *testing.T, c *testenv.Cluster) *xshard.Router {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	return xshard.NewRouter(c.Config, testenv.TestLogger(t), crashCaller, client.WithDialer(d.DialContext))
}

// crashAnswer checks a retry's answer against the outcome looked up by id.
func crashAnswer(t *testing.T, what string, status proto.XStatus, err error) {
	t.Helper()
	var xe *xshard.Error
	var unknown *xshard.UnknownOutcomeError
	switch {
	case err == nil && status != proto.XCommitted:
		t.Fatalf("%s told committed; outcome by id %v", what, status)
	case errors.As(err, &xe) && status != proto.XFailed:
		t.Fatalf("%s told failed (%v); outcome by id %v", what, err, status)
	case errors.As(err, &unknown):
		t.Logf("%s got no answer in time: %v", what, err)
	case err != nil && xe == nil:
		t.Fatalf("%s: error of unexpected type %T: %v", what, err, err)
	}
}

func runCrashCase(t *testing.T, c *testenv.Cluster, in *crashInjector, k crashCase, i int, rng *rand.Rand) {
	dir := fmt.Sprintf("/crash-%d", i)
	r, entry := crashRouter(t, c, rng)
	defer r.Close()
	setup, cancelSetup := context.WithTimeout(context.Background(), crashSettle)
	defer cancelSetup()
	for _, sh := range crashShards {
		if _, err := xshard.CrossShardTransaction(setup, r, []xshard.MultiRequestForShard{
			{Shard: sh, Requests: []proto.MultiOp{create(dir, ""), create(dir+"/v", "0")}},
		}); err != nil {
			t.Fatalf("setup on %s: %v", sh, err)
		}
	}
	var tx []xshard.MultiRequestForShard
	for _, sh := range crashShards {
		version := int32(0)
		if k.conflict && sh == crashRefuser {
			version = 7
		}
		tx = append(tx, xshard.MultiRequestForShard{Shard: sh, Requests: []proto.MultiOp{
			setData(dir+"/v", "1", version), create(dir+"/n", "x")}})
	}
	id := uuid.NewString()
	t.Logf("txn %s under %s; client enters %s by %s (leader %s)", id, dir, crashCoord, entry, c.Leader(crashCoord))

	ctx, cancel := context.WithTimeout(context.Background(), crashSettle)
	defer cancel()
	var (
		fired    atomic.Bool
		injected = make(chan struct{}) // closed when the fault is set off
		faults   sync.WaitGroup        // kills and restarts in flight
	)
	defer func() {
		// Whatever happened, leave every member running for the next case.
		for _, sh := range crashShards {
			for _, m := range c.Shard(sh).Members {
				if c.Member(m.ID) == nil {
					c.Restart(m.ID)
				}
			}
		}
	}()
	defer faults.Wait()
	defer in.set(nil)
	var (
		holeOnce sync.Once
		isolated []string // hole: the coordinator's members killed before the prepare round
	)
	elsewhere := elsewhereRouter(t, c)
	defer elsewhere.Close()
	// The retry from elsewhere as the fault strikes (retry cases only: it
	// drives the transaction, which a client that gave up does not).
	during := make(chan error, 1)
	var retries sync.WaitGroup
	defer retries.Wait()
	retryDuring := func() {
		retries.Add(1)
		go func() {
			defer retries.Done()
			rctx, rcancel := context.WithTimeout(context.Background(), crashSettle)
			defer rcancel()
			_, err := xshard.CrossShardTransaction(rctx, elsewhere, tx, xshard.Options{ID: id, Coordinator: crashCoord, Deadline: crashDeadline})
			during <- err
		}()
	}
	in.set(func(step, txid, shard string) error {
		if txid != id {
			return nil
		}
		if k.fault == "hole" && step == xshard.StepBeforePrepare {
			// Take the coordinator shard's quorum away from under the
			// driver: every member but the one the client entered by,
			// which runs the driver.
			holeOnce.Do(func() {
				for _, m := range c.Shard(crashCoord).Members {
					if m.ID != entry {
						c.Kill(m.ID)
						isolated = append(isolated, m.ID)
					}
				}
				t.Logf("hole: killed %v; %s drives alone", isolated, entry)
			})
			return nil
		}
		if step != k.step || (shard != "" && shard != k.shard()) || !fired.CompareAndSwap(false, true) {
			return nil
		}
		defer close(injected)
		if k.client == "gone" {
			cancel()
		}
		if k.client == "retry" {
			retryDuring()
		}
		restart := func(ids ...string) {
			faults.Add(1)
			go func() {
				defer faults.Done()
				for _, id := range ids {
					if id != "" && c.Member(id) == nil {
						c.Restart(id)
					}
				}
			}()
		}
		switch k.fault {
		case "abandon":
			return errCrash
		case "lost":
			return xshard.ErrLostReply
		case "hole":
			holeOnce.Do(func() {}) // isolated is set
			// The hook runs in entry's driver, which Kill waits for: kill
			// from aside.
			t.Logf("hole: %s applied prepare; killing %s", shard, entry)
			faults.Add(1)
			go func() {
				defer faults.Done()
				c.Kill(entry)
				restart(append(isolated, entry)...)
			}()
			return errCrash
		}
		victim := c.Leader(k.shard())
		if k.fault == "kill-continue" {
			victim = entry // the member that runs the driver
		}
		t.Logf("fault at %s(%s): killing %s", step, shard, victim)
		if victim == "" {
			t.Logf("shard %s has no leader to kill", k.shard())
		}
		if k.target == "coord" {
			// The hook may run in the victim's own driver, which Kill waits
			// for: kill from aside, and the driver dies with its leader
			// (kill-continue: goes on while its member shuts down).
			killed := make(chan struct{})
			faults.Add(1)
			go func() {
				defer faults.Done()
				if victim != "" {
					c.Kill(victim)
				}
				close(killed)
				restart(victim)
			}()
			if k.fault == "kill-continue" {
				// Go on once the member has begun to shut down: its
				// cross-shard service closed and waits for this driver, or
				// (a driver Close does not wait for) the member is down.
				deadline := time.After(crashSettle)
				for !serviceClosing() {
					select {
					case <-killed:
					case <-deadline:
						t.Errorf("member %s never began to shut down", victim)
					case <-time.After(time.Millisecond):
						continue
					}
					break
				}
				return nil
			}
			return errCrash
		}
		// A participant's leader applied the message and died before
		// answering: the driver sends it again, to whoever leads next (or,
		// kill-abandon, dies too).
		if victim != "" {
			c.Kill(victim)
		}
		restart(victim)
		switch {
		case k.fault == "kill-abandon":
			return errCrash
		case shard == "":
			return nil // not a message to b: the driver goes on
		}
		return xshard.ErrLostReply
	})

	start := time.Now()
	res, txErr := xshard.CrossShardTransaction(ctx, r, tx, xshard.Options{ID: id, Coordinator: crashCoord, Deadline: crashDeadline})
	t.Logf("client answer after %v: %v", time.Since(start).Round(time.Millisecond), txErr)

	// The cleanup steps come after the answer: wait for the fault, then
	// for the faulty members to be back.
	bound := time.Now().Add(crashSettle)
	select {
	case <-injected:
	case <-time.After(time.Until(bound)):
		t.Fatalf("the fault at %s was never injected", k.step)
	}
	faults.Wait()
	in.set(nil)

	var (
		present map[string]bool
		why     string
	)
	for {
		present, why = crashSettled(c, dir)
		if why == "" {
			break
		}
		if time.Now().After(bound) {
			t.Fatalf("not settled %v after the fault: %s\n%s", crashSettle, why, crashDump(c, dir))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("settled %v after the client's answer; effects %v", time.Since(start).Round(time.Millisecond), present)

	all, none := true, true
	for _, sh := range crashShards {
		all = all && present[sh]
		none = none && !present[sh]
	}
	if !all && !none {
		t.Fatalf("transaction applied on some shards only: %v\n%s", present, crashDump(c, dir))
	}
	if k.conflict && !none {
		t.Fatalf("a transaction refused by %s was applied", crashRefuser)
	}

	lookup, cancelLookup := context.WithTimeout(context.Background(), crashSettle)
	defer cancelLookup()
	status, err := xshard.Outcome(lookup, r, crashCoord, id)
	require.NoError(t, err, "outcome lookup")
	t.Logf("outcome by id: %v", status)
	if all != (status == proto.XCommitted) {
		t.Fatalf("outcome by id %v, but effects present %v", status, present)
	}
	if status != proto.XCommitted && status != proto.XFailed && (status != proto.XUnknown || !none) {
		t.Fatalf("outcome by id %v after the pending sets drained", status)
	}

	var xe *xshard.Error
	var unknown *xshard.UnknownOutcomeError
	switch {
	case txErr == nil:
		if !all {
			t.Fatalf("client told committed, effects present %v", present)
		}
		for _, sr := range res {
			if len(sr.Results) != 2 {
				t.Fatalf("client told committed with results %+v", res)
			}
		}
	case errors.As(txErr, &xe):
		if !none {
			t.Fatalf("client told failed (%v), effects present %v", txErr, present)
		}
	case errors.As(txErr, &unknown):
		if k.client != "gone" {
			t.Fatalf("a client that retries got no answer: %v", txErr)
		}
	default:
		t.Fatalf("client error of unexpected type %T: %v", txErr, txErr)
	}

	// Without a kill the end is foreseeable: a transaction every shard
	// accepts commits, unless the only driver was abandoned before sending
	// anything and the client left.
	if (k.fault == "abandon" || k.fault == "lost") && !k.conflict {
		nothing := k.step == xshard.StepBeforePrepare && k.client == "gone"
		if nothing && status != proto.XUnknown {
			t.Fatalf("abandoned before prepare and given up, yet outcome %v", status)
		}
		if !nothing && !all {
			t.Fatalf("outcome %v, want committed", status)
		}
	}
	if k.client == "retry" && (k.fault == "abandon" || k.fault == "lost") && !k.conflict && txErr != nil {
		t.Fatalf("a client that retries got %v, want success", txErr)
	}
	if k.client == "retry" && k.conflict && !errors.As(txErr, &xe) {
		t.Fatalf("a client that retries got %v, want a refusal", txErr)
	}

	if k.client == "retry" {
		retries.Wait()
		crashAnswer(t, "the retry from another address during the fault", status, <-during)
	}
	if status == proto.XCommitted || status == proto.XFailed {
		_, err := xshard.CrossShardTransaction(lookup, elsewhere, tx, xshard.Options{ID: id, Coordinator: crashCoord, Deadline: crashDeadline})
		crashAnswer(t, "the retry from another address after the end", status, err)
	}
	for {
		again, why := crashSettled(c, dir)
		if why == "" {
			require.Equal(t, present, again, "the retries changed the effects")
			break
		}
		if time.Now().After(bound.Add(crashSettle)) {
			t.Fatalf("not settled after the retries: %s\n%s", why, crashDump(c, dir))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// crashSettled reports which shards hold the effects under dir, or why
// the cluster has not settled: a member down, a record or a lock left, or
// members of a shard that disagree.
func crashSettled(c *testenv.Cluster, dir string) (map[string]bool, string) {
	present := map[string]bool{}
	for _, sh := range crashShards {
		var first string
		for j, m := range c.Shard(sh).Members {
			mem := c.Member(m.ID)
			if mem == nil {
				return nil, m.ID + " is down"
			}
			var recs, locks int
			var got string
			mem.Replica.View(func(st *fsm.State) {
				recs, locks = len(st.XRecords()), st.LockCount()
				got = crashEffects(st, dir)
			})
			if recs+locks > 0 {
				return nil, fmt.Sprintf("%s holds %d records, %d locks", m.ID, recs, locks)
			}
			if j == 0 {
				first = got
			} else if got != first {
				return nil, fmt.Sprintf("members of %s disagree: %q vs %q", sh, first, got)
			}
		}
		switch first {
		case "v=1 n=x":
			present[sh] = true
		case "v=0 n=-":
			present[sh] = false
		default:
			return nil, fmt.Sprintf("%s holds a partial transaction: %s", sh, first)
		}
	}
	return present, ""
}

func crashEffects(st *fsm.State, dir string) string {
	v, n := "-", "-"
	if nd := st.Node(dir + "/v"); nd != nil {
		v = string(nd.Data())
	}
	if nd := st.Node(dir + "/n"); nd != nil {
		n = string(nd.Data())
	}
	return "v=" + v + " n=" + n
}

// crashDump describes every member, for a failure message.
func crashDump(c *testenv.Cluster, dir string) string {
	var b strings.Builder
	for _, sh := range crashShards {
		for _, m := range c.Shard(sh).Members {
			mem := c.Member(m.ID)
			if mem == nil {
				fmt.Fprintf(&b, "%s: down\n", m.ID)
				continue
			}
			mem.Replica.View(func(st *fsm.State) {
				fmt.Fprintf(&b, "%s: leader=%v time=%d %s locks=%d", m.ID, mem.Replica.IsLeader(), st.Time(), crashEffects(st, dir), st.LockCount())
				for _, rec := range st.XRecords() {
					fmt.Fprintf(&b, " [%s %v coord=%s deadline=%d err=%v]", rec.ID, rec.Status, rec.Coordinator, rec.Deadline, rec.Err)
				}
				b.WriteString("\n")
			})
		}
	}
	return b.String()
}

// serviceClosing reports whether a member's cross-shard service is closing:
// its Close waits for the drivers still running.
func serviceClosing() bool {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	for n == len(buf) { // every goroutine's stack, not the first megabyte's
		buf = make([]byte, 2*len(buf))
		n = runtime.Stack(buf, true)
	}
	for g := range strings.SplitSeq(string(buf[:n]), "\n\n") {
		if strings.Contains(g, " [sync.WaitGroup.Wait") && strings.Contains(g, "/xshard.(*Service).Close(") {
			return true
		}
	}
	return false
}

package xshard_test

// The bank's retries (issue 38, "the net that finds the next ones") and
// its setup through lost connections (issue 41).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// multiFunc sends a multi on a client; the bank's setup sends it with
// client.Client.Multi, a test through a connection it breaks.
type multiFunc func(ctx context.Context, cl *client.Client, ops []proto.MultiOp) error

func sendMulti(ctx context.Context, cl *client.Client, ops []proto.MultiOp) error {
	_, err := cl.Multi(ctx, ops...)
	return err
}

// setupShard creates what ops create on shard with one multi, tried again
// through lost connections, moved or expired sessions and members without
// a leader until ctx ends. A try whose answer was lost may have committed
// (or still commit), and then the next is refused: after a lost try, a
// refusal means set up if the shard holds every node the multi creates,
// with its data, never changed, and is an error otherwise.
func setupShard(ctx context.Context, r *xshard.Router, shard string, ops []proto.MultiOp, send multiFunc) error {
	lost := false // a try got no answer: it may have committed
	for {
		cl, err := r.Client(ctx, shard)
		if err == nil {
			err = send(ctx, cl, ops)
			var refused *client.MultiError
			if errors.As(err, &refused) && lost {
				// Refused, maybe for what a lost try created.
				var done bool
				if done, err = created(ctx, cl, ops); done {
					return nil
				} else if err == nil {
					err = refused
				}
			}
			switch {
			case err == nil:
				return nil
			case !answerLost(err):
				return fmt.Errorf("setup of shard %s: %w", shard, err)
			}
			lost = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("setup of shard %s: no answer before %w (last error: %v)", shard, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// errNotSetUp says that a shard holds other nodes than the setup creates.
var errNotSetUp = errors.New("not as the setup creates it")

// answerLost reports whether err means that a request got no answer (it
// may or may not have applied), not that the shard refused it.
func answerLost(err error) bool {
	var code proto.Code
	var refused *client.MultiError
	switch {
	case errors.As(err, &refused) || errors.Is(err, errNotSetUp):
		return false
	case errors.As(err, &code):
		return slices.Contains([]proto.Code{proto.ErrConnectionLoss, proto.ErrSessionExpired, proto.ErrSessionMoved,
			proto.ErrOperationTimeout, proto.ErrRequestTimeout, proto.ErrSystemError}, code)
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// created reports whether the shard holds every node the creates of ops
// make, with their data and never changed since (a multi is atomic: all
// or none).
func created(ctx context.Context, cl *client.Client, ops []proto.MultiOp) (bool, error) {
	if _, err := cl.Sync(ctx, "/"); err != nil {
		return false, err
	}
	found := 0
	for _, op := range ops {
		cr := op.Req.(*proto.CreateRequest)
		data, st, err := cl.Get(ctx, cr.Path)
		switch {
		case errors.Is(err, proto.ErrNoNode):
			continue
		case err != nil:
			return false, err
		case string(data) != string(cr.Data) || st.Version != 0:
			return false, fmt.Errorf("%s is %q at version %d: %w", cr.Path, data, st.Version, errNotSetUp)
		}
		found++
	}
	if found != 0 && found != len(ops) {
		return false, fmt.Errorf("%d of the setup's %d nodes exist: %w", found, len(ops), errNotSetUp)
	}
	return found == len(ops), nil
}

// bankSetupOps are the creates that set up the bank's part on shard s:
// /bank, its accounts and every client's marker directory.
func bankSetupOps(s int) []proto.MultiOp {
	ops := []proto.MultiOp{create("/bank", "")}
	for i := s * bankAcctPer; i < (s+1)*bankAcctPer; i++ {
		ops = append(ops, create(acctPath(i), strconv.Itoa(bankInitial)))
	}
	for k := range bankClients {
		ops = append(ops, create(markerDir(k), ""))
	}
	return ops
}

// TestBankSetupThroughLostConnections: the bank's setup multi is sent
// again when its connection is lost, and a try that committed but whose
// answer was lost counts as the setup, not as an error; a setup refused
// for another reason (the nodes are there with other data) is an error.
func TestBankSetupThroughLostConnections(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Members: 3})
	d := &cutDialer{}
	r := xshard.NewRouter(c.Config, testenv.TestLogger(t), client.WithDialer(d.dial))
	t.Cleanup(r.Close)
	ctx := ctxT(t)
	// loseFirst breaks the first try's connection: before it is sent, or
	// once it committed (its answer lost).
	loseFirst := func(afterCommit bool) (multiFunc, *atomic.Int32) {
		var tries atomic.Int32
		return func(ctx context.Context, cl *client.Client, ops []proto.MultiOp) error {
			if tries.Add(1) > 1 {
				return sendMulti(ctx, cl, ops)
			}
			if afterCommit {
				if err := sendMulti(ctx, cl, ops); err != nil {
					return err
				}
			}
			d.cut()
			d.resume()
			return proto.ErrConnectionLoss
		}, &tries
	}
	for _, k := range []struct {
		name        string
		afterCommit bool
	}{{"lost before it was sent", false}, {"answer lost after it committed", true}} {
		t.Run(k.name, func(t *testing.T) {
			ops := []proto.MultiOp{create("/setup-"+strconv.FormatBool(k.afterCommit), "x"),
				create("/setup-"+strconv.FormatBool(k.afterCommit)+"/a", "100")}
			send, tries := loseFirst(k.afterCommit)
			require.NoError(t, setupShard(ctx, r, "a", ops, send))
			assert.Equal(t, int32(2), tries.Load(), "sent again")
			data, _ := node(t, c, "a", "/setup-"+strconv.FormatBool(k.afterCommit)+"/a")
			assert.Equal(t, "100", data)
		})
	}
	t.Run("other data is refused", func(t *testing.T) {
		ops := []proto.MultiOp{create("/setup-true", "y")}
		err := setupShard(ctx, r, "a", ops, sendMulti)
		require.Error(t, err)
		assert.ErrorIs(t, err, proto.ErrNodeExists)
	})
}

// --- retries of a transfer ---

// bankCaller is worker k's identity: its retries from another connection
// and address are its own (an identity-less caller is told apart by its
// address).
func bankCaller(k int) client.Option {
	return client.WithAuth("digest", fmt.Appendf(nil, "bank%d:secret", k))
}

// bankRouters are a worker's routes to the shards: its own; elsewhere,
// other connections (from another address where the cluster allows it)
// that retry its transfers; loser, whose connection drops right after it
// sends a transfer armed to lose its answer; and foreign, another
// identity's.
type bankRouters struct {
	own, elsewhere, loser, foreign *xshard.Router
	lose                           *replyLoser
}

func newBankRouters(b *bank, k int) *bankRouters {
	log := testenv.TestLogger(b.t)
	var d client.Dialer = (&net.Dialer{}).DialContext
	if b.elsewhere != nil {
		d = b.elsewhere
	}
	lose := &replyLoser{dial: (&net.Dialer{}).DialContext, dropped: &b.dropped}
	return &bankRouters{
		own:       xshard.NewRouter(b.cfg, log, bankCaller(k)),
		elsewhere: xshard.NewRouter(b.cfg, log, bankCaller(k), client.WithDialer(d)),
		loser:     xshard.NewRouter(b.cfg, log, bankCaller(k), client.WithDialer(lose.dialer)),
		foreign:   xshard.NewRouter(b.cfg, log, bankCaller(bankClients+k)),
		lose:      lose,
	}
}

func (rs *bankRouters) close() {
	rs.own.Close()
	rs.elsewhere.Close()
	rs.loser.Close()
	rs.foreign.Close()
}

// loopback2 dials from 127.0.0.2: another source address on this host.
var loopback2 client.Dialer = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext

// replyLoser is a dialer whose connections, once armed, close right after
// they send a cross-shard transaction: the request leaves, its answer
// cannot come back, and the router sends it again on a new connection
// (a client that reconnects between prepare and commit).
type replyLoser struct {
	dial    client.Dialer
	armed   atomic.Bool
	dropped *atomic.Int64 // connections dropped so, counted for the run's log
}

func (d *replyLoser) dialer(ctx context.Context, network, addr string) (net.Conn, error) {
	nc, err := d.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &losingConn{Conn: nc, d: d}, nil
}

type losingConn struct {
	net.Conn
	d *replyLoser
}

func (c *losingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err == nil && sendsTransaction(p) && c.d.armed.CompareAndSwap(true, false) {
		c.Conn.Close()
		c.d.dropped.Add(1)
	}
	return n, err
}

// sendsTransaction reports whether a write holds a request frame of a
// cross-shard transaction (length, xid, opcode, body; a write may batch
// several frames).
func sendsTransaction(p []byte) bool {
	for len(p) >= 12 {
		if proto.OpCode(binary.BigEndian.Uint32(p[8:12])) == proto.OpXTransaction {
			return true
		}
		n := int(binary.BigEndian.Uint32(p))
		if n < 8 || n > len(p)-4 {
			return false
		}
		p = p[4+n:]
	}
	return false
}

// bankSending is one sending of a transfer: when it went and its answer.
type bankSending struct {
	via       string // which route sent it
	call, ret int64
	status    bankStatus
	err       error
}

// send sends transfer reqs with id through r once, within timeout.
func (b *bank) send(r *xshard.Router, via string, reqs []xshard.MultiRequestForShard, id, coord string, timeout time.Duration) bankSending {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s := bankSending{via: via, call: b.now()}
	_, s.err = xshard.CrossShardTransaction(ctx, r, reqs, xshard.Options{ID: id, Coordinator: coord})
	s.ret = b.now()
	var xe *xshard.Error
	switch {
	case s.err == nil:
		s.status = txOK
	case errors.As(s.err, &xe):
		s.status = txFailed
	default: // *xshard.UnknownOutcomeError, or no answer at all
		s.status = txUnknown
	}
	return s
}

// bankRetry is how a worker retries a transfer, drawn from its seed.
type bankRetry int

// bankRetries counts the transfers retried each way, the connections the
// reply losers dropped, and the retries with other ops, and of another
// identity, refused.
type bankRetries struct {
	retries         [retryKinds]atomic.Int64
	dropped         atomic.Int64
	refusedOtherOps atomic.Int64
	refusedForeign  atomic.Int64
}

func (r *bankRetries) String() string {
	var parts []string
	for k := retryAfter; k < retryKinds; k++ {
		parts = append(parts, fmt.Sprintf("%v %d", k, r.retries[k].Load()))
	}
	return fmt.Sprintf("retried %s; %d connections dropped after sending; %d retries with other ops refused; %d of another identity refused",
		strings.Join(parts, ", "), r.dropped.Load(), r.refusedOtherOps.Load(), r.refusedForeign.Load())
}

const (
	retryNone      bankRetry = iota
	retryAfter               // the same id and ops from elsewhere once the first sending ends
	retryAlongside           // the same id and ops from elsewhere at the same time
	retryLoseReply           // the first sending's connection drops once it is sent, then retryAfter
	retryOtherOps            // the same id with other ops once the first sending is answered: refused
	retryForeign             // the same id and ops from another identity once the first sending is answered
	retryKinds
)

func (k bankRetry) String() string {
	return [...]string{"none", "after", "alongside", "lose-reply", "other-ops", "foreign"}[k]
}

// drawRetry picks how a transfer is retried: mostly not at all.
func drawRetry(rng interface{ IntN(int) int }) bankRetry {
	switch n := rng.IntN(20); {
	case n < 2:
		return retryAfter
	case n < 4:
		return retryAlongside
	case n < 6:
		return retryLoseReply
	case n < 7:
		return retryOtherOps
	case n < 8:
		return retryForeign
	}
	return retryNone
}

// transfer sends a transfer and its retries as how says, and returns the
// outcome they agree on with the span of time it took effect in (or not).
func (b *bank) transfer(rs *bankRouters, how bankRetry, in bankInput, timeout time.Duration) (bankOutput, int64, int64) {
	reqs := transferReqs(in, 0)
	first := func(r *xshard.Router, via string) bankSending {
		return b.send(r, via, reqs, in.ID, in.Coord, timeout)
	}
	// again retries from elsewhere, unless the run is ending (a worker
	// then takes no more than one sending's time to stop).
	again := func(sent []bankSending) []bankSending {
		if b.stopped() {
			return sent
		}
		return append(sent, b.send(rs.elsewhere, "elsewhere", reqs, in.ID, in.Coord, bankTxTimeout))
	}
	var sent []bankSending
	switch how {
	case retryNone, retryOtherOps, retryForeign: // these follow the answer at once: while the shards may still hold the transaction
		sent = append(sent, first(rs.own, "own"))
	case retryAlongside:
		var wg sync.WaitGroup
		var side []bankSending
		wg.Add(1)
		go func() {
			defer wg.Done()
			side = again(nil)
		}()
		sent = append(sent, first(rs.own, "own"))
		wg.Wait()
		sent = append(sent, side...)
	case retryLoseReply:
		rs.lose.armed.Store(true)
		s := first(rs.loser, "losing its reply")
		rs.lose.armed.Store(false)
		sent = again(append(sent, s))
	default:
		sent = again(append(sent, first(rs.own, "own")))
	}
	b.retries[how].Add(1)
	status, call, ret := settle(sent)
	for _, s := range sent {
		var ue *xshard.UnknownOutcomeError
		switch {
		case s.status != txUnknown && s.status != status:
			b.t.Errorf("transfer %s (%s): answers disagree: %s", in.ID, how, describeSendings(sent))
		case errors.Is(s.err, proto.ErrBadArguments):
			b.t.Errorf("transfer %s (%s): a sending refused: %s", in.ID, how, describeSendings(sent))
		case s.status == txUnknown && !errors.As(s.err, &ue):
			b.t.Logf("transfer %s (%s): %v (outcome unknown)", in.ID, s.via, s.err)
		}
	}
	if how == retryOtherOps && status != txUnknown && !b.stopped() {
		// The transaction of this id is decided: one with other ops must
		// be refused, whatever the shards still hold of it.
		s := b.send(rs.elsewhere, "elsewhere, other ops", transferReqs(in, 1), in.ID, in.Coord, bankTxTimeout)
		switch {
		case errors.Is(s.err, proto.ErrBadArguments):
			b.refusedOtherOps.Add(1)
		case s.status != txUnknown:
			b.t.Errorf("transfer %s (%v): a retry with other ops was not refused: %v", in.ID, status, s.err)
		}
	}
	if how == retryForeign && status != txUnknown && !b.stopped() {
		b.foreign(rs, in, reqs, status)
	}
	return bankOutput{Status: status}, call, ret
}

// foreign sends a decided transfer again, the same id and ops, as another
// identity, which does not own it: refused (NoAuth) while a shard holds
// it, told its outcome once every shard only remembers it; it changes
// nothing either way (the markers and the chains show a second
// application).
func (b *bank) foreign(rs *bankRouters, in bankInput, reqs []xshard.MultiRequestForShard, status bankStatus) {
	s := b.send(rs.foreign, "another identity", reqs, in.ID, in.Coord, bankTxTimeout)
	switch {
	case errors.Is(s.err, proto.ErrNoAuth):
		b.refusedForeign.Add(1)
	case s.status != txUnknown && s.status != status:
		b.t.Errorf("transfer %s (%v): another identity's retry told %v: %v", in.ID, status, s.status, s.err)
	}
}

// stopped reports whether the run is ending.
func (b *bank) stopped() bool {
	select {
	case <-b.stop:
		return true
	default:
		return false
	}
}

// settle is what the sendings of one transfer (its id and ops) say: the
// answers that tell (ok, failed) must agree, and the transfer took effect,
// or not, between the first call and the first of those answers; with
// none, it is unknown until the last one returned.
func settle(sent []bankSending) (status bankStatus, call, ret int64) {
	status, call, ret = txUnknown, sent[0].call, sent[0].ret
	told := false
	for _, s := range sent {
		call = min(call, s.call)
		switch {
		case s.status != txUnknown && (!told || s.ret < ret):
			status, ret, told = s.status, s.ret, true
		case !told:
			ret = max(ret, s.ret)
		}
	}
	return status, call, ret
}

// describeSendings says what each sending of a transfer was told, and when.
func describeSendings(sent []bankSending) string {
	var parts []string
	for _, s := range sent {
		parts = append(parts, fmt.Sprintf("%s %v [%v, %v] (%v)", s.via, s.status, time.Duration(s.call), time.Duration(s.ret), s.err))
	}
	return strings.Join(parts, "; ")
}

// TestSettle: the sendings of a transfer settle on the answer that tells,
// at the first such answer; with none, unknown until the last returned.
func TestSettle(t *testing.T) {
	ok := bankSending{call: 0, ret: 10, status: txOK}
	lost := bankSending{call: 5, ret: 30, status: txUnknown}
	late := bankSending{call: 12, ret: 20, status: txOK}
	s, call, ret := settle([]bankSending{ok, late})
	assert.Equal(t, []any{txOK, int64(0), int64(10)}, []any{s, call, ret})
	s, call, ret = settle([]bankSending{lost, late})
	assert.Equal(t, []any{txOK, int64(5), int64(20)}, []any{s, call, ret})
	s, call, ret = settle([]bankSending{lost, {call: 31, ret: 40, status: txUnknown}})
	assert.Equal(t, []any{txUnknown, int64(5), int64(40)}, []any{s, call, ret})
}

// TestSendsTransaction: the reply loser finds a transaction's frame in a
// write, alone or after other frames, and nothing else.
func TestSendsTransaction(t *testing.T) {
	frame := func(op proto.OpCode, body int) []byte {
		f := binary.BigEndian.AppendUint32(nil, uint32(8+body))
		f = binary.BigEndian.AppendUint32(f, 7)
		f = binary.BigEndian.AppendUint32(f, uint32(op))
		return append(f, make([]byte, body)...)
	}
	assert.True(t, sendsTransaction(frame(proto.OpXTransaction, 40)))
	assert.True(t, sendsTransaction(slices.Concat(frame(proto.OpPing, 0), frame(proto.OpGetData, 12), frame(proto.OpXTransaction, 40))))
	assert.False(t, sendsTransaction(slices.Concat(frame(proto.OpPing, 0), frame(proto.OpGetData, 12))))
	assert.False(t, sendsTransaction(frame(proto.OpGetData, 12)[:10]), "a short write")
}

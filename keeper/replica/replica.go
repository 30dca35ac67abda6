package replica

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/nodelog"
	"github.com/xkeeper/xkeeper/keeper/peerlink"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// ErrClosed is returned by a replica that has been closed.
var ErrClosed = errors.New("replica: closed")

// Peer is a member of the shard as the replica needs to know it.
type Peer struct {
	ID       string
	RaftAddr string // its raft port: raft, and followers' forwarding links
}

// Config configures one member.
type Config struct {
	Shard string // the shard's name, part of its identity
	// Join starts a member with no state as a newcomer to a running shard
	// (it waits for the leader to add it, or, listed in the configuration
	// already, to reach it); Identity is then the shard's, asked of its
	// members.
	Join bool
	// Bootstrap starts a member with no state as the first of a new shard:
	// it records Identity (a new random one if empty) and bootstraps Raft
	// with Peers as the configuration. Ignored for a directory that holds a
	// member; without Join or Bootstrap, Open refuses one that holds none
	// (ErrEmptyDataDir).
	Bootstrap          bool
	Identity           string
	ID                 string
	DataDir            string
	Peers              []Peer       // every member, this one included
	Fsync              bool         // sync the Raft stores to disk; false only for tests
	LogStore           string       // LogStoreWAL, LogStoreNode or LogStoreBolt; empty: see DefaultLogStore
	NodeLog            *nodelog.Log // the node's shared Raft log (StartNode); nil if the member runs alone
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotThreshold  uint64
	SnapshotInterval   time.Duration
	TrailingLogs       uint64
	LogStallTimeout    time.Duration    // a log write unanswered this long stops the leader's appends (stallWatch); 0: never
	MaxBatch           int              // requests per log entry
	AvailabilityZone   string           // served at /keeper/availability_zone (fsm.State.SetAvailabilityZone); "": none
	DecisionHold       time.Duration    // how long the leader holds a cross-shard decision back for company (see batcher); 0: not at all
	Clock              func() time.Time // the wall clock stamped on entries; time.Now if nil
	Auth               *peerlink.Auth   // authenticates the links to other members; required
	PeerPort           *PeerPort        // a raft port shared with replicas of other shards; nil opens one at the member's raft address
	Logger             *slog.Logger
}

// ApplyHook sees every applied entry's results and events while the state
// is still locked, so watches fire in log order and before any read of the
// new state. restored is true after a snapshot replaced the whole state.
type ApplyHook func(st *fsm.State, results []fsm.Result, events []fsm.Event, restored bool)

// Replica is one running member of a shard.
type Replica struct {
	cfg      Config
	identity string // the shard incarnation this member belongs to
	// bootstrappedAt is when this member bootstrapped a new shard in this
	// process (zero if it did not): see Adoptable.
	bootstrappedAt time.Time
	adoption       adoption // whom this member handed its identity, and whether another member led
	log            *slog.Logger
	raft           *raft.Raft
	stream         *stream
	trans          *quietTransport // raft's transport; tells followers of commits
	logFault       logFault        // how the last Raft log write went
	stores         []io.Closer
	nodeLog        *nodelog.Log // the node log that holds the member's Raft log, if any

	mu      sync.RWMutex // guards state; held for writing while an entry applies
	state   *fsm.State
	applied *sync.Cond // signalled after each apply, with mu
	hook    ApplyHook
	// stateIndex is the index of the last log entry the state machine
	// applied (see StateApplied).
	stateIndex atomic.Uint64

	waitMu  sync.Mutex
	waiters map[uint64]waiter
	nextID  atomic.Uint64
	early   atomic.Int64 // writes answered from the leader's result
	broken  brokenConns  // connections a write of which was lost: their later writes are refused

	linkMu sync.Mutex
	links  map[linkKey]*link // the leader's forwarded requests, by proposer and id

	proposals  chan proposal
	queued     atomic.Int64   // proposals not yet handled (proposed, relayed or failed) by proposeLoop
	gate       sync.RWMutex   // proposeLoop holds it for reading while it handles a batch; a handover for writing
	flights    sync.WaitGroup // entries proposed whose futures have not returned
	unhold     chan struct{}  // a request waits on a lock: propose the held decisions now
	fwd        *forwarder
	relays     *relays
	leaderless atomic.Bool  // the last awaitLeader found none
	inFlight   atomic.Int64 // entries proposed whose futures have not returned (flights)
	forwarded  atomic.Int64 // waiters forwarded to a leader (gen != 0), under waitMu
	started    atomic.Bool  // raft is set: NewRaft applies the log's entries before it returns
	bootedAt   time.Time    // when raft started: leader contact counts from here until the first
	listed     atomic.Bool  // a configuration this member saw listed it (see Removed)
	onTouch    atomic.Pointer[func([]int64)]
	leaderCh   chan bool
	onLeader   atomic.Pointer[func(bool)]
	metrics    *metrics
	// committedConf is the last configuration entry this member applied
	// (so committed); nil before one, and after a snapshot replaced the
	// state.
	committedConf atomic.Pointer[appliedConf]
	changing      sync.Mutex // held by the membership change under way (ErrChangeBusy)
	closed        chan struct{}
	wg            sync.WaitGroup
}

type waiter struct {
	done  func(fsm.Result)
	gen   uint64 // peer-link generation it was forwarded on, 0 if proposed locally
	early bool   // may be answered by the leader's result, before the local apply
	conn  uint64 // the client connection that sent it (fsm.Request.Conn)
}

// proposal is a request waiting for the leader's group commit; fail is
// called when its entry cannot be committed here.
type proposal struct {
	req  fsm.Request
	fail func(id uint64)
	// term, if not 0, is the term in which this member, then leading,
	// decided the request (SubmitAsLeader): it is proposed in that term
	// only, never relayed to another leader.
	term uint64
}

// Open starts a member: from the state in its data directory, or, for a
// directory that holds no member, as the first member of a new shard
// (Config.Bootstrap) or a newcomer to a running one (Config.Join).
func Open(cfg Config) (*Replica, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 1024
	}
	if cfg.Auth == nil {
		return nil, errors.New("replica: no peer authentication (Config.Auth)")
	}
	self, ok := findPeer(cfg.Peers, cfg.ID)
	if !ok {
		return nil, fmt.Errorf("replica: member %q is not among the peers", cfg.ID)
	}
	if cfg.Join && cfg.Bootstrap {
		return nil, errors.New("replica: a member either joins a running shard or bootstraps a new one, not both")
	}
	if empty, err := Empty(cfg.DataDir); err != nil {
		return nil, err
	} else if empty && !cfg.Join && !cfg.Bootstrap {
		return nil, fmt.Errorf("%w: %s", ErrEmptyDataDir, cfg.DataDir)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, err
	}
	r := &Replica{
		cfg: cfg, log: cfg.Logger.With("member", cfg.ID), state: fsm.New(),
		waiters: map[uint64]waiter{}, links: map[linkKey]*link{}, proposals: make(chan proposal, 4*cfg.MaxBatch),
		unhold: make(chan struct{}, 1), leaderCh: make(chan bool, 16), closed: make(chan struct{}), metrics: newMetrics(),
	}
	r.state.SeedSessions(cfg.Shard)
	r.state.SetAvailabilityZone(cfg.AvailabilityZone)
	r.applied = sync.NewCond(r.mu.RLocker())
	r.nextID.Store(rand.Uint64() >> 1)
	r.relays = newRelays(r) // before the forwarder, whose touch loop looks at it
	r.fwd = newForwarder(r)
	if err := r.startRaft(self); err != nil {
		r.closeStores()
		return nil, err
	}
	r.wg.Add(2)
	go r.proposeLoop()
	go r.leaderLoop()
	return r, nil
}

// configuration is the Raft configuration of peers, every one a voter.
func configuration(peers []Peer) raft.Configuration {
	var conf raft.Configuration
	for _, p := range peers {
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
	}
	return conf
}

func findPeer(peers []Peer, id string) (Peer, bool) {
	for _, p := range peers {
		if p.ID == id {
			return p, true
		}
	}
	return Peer{}, false
}

func (r *Replica) startRaft(self Peer) error {
	cfg := r.cfg
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = newHclog(r.log, "raft")
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 512
	rc.NotifyCh = r.leaderCh
	setDur(&rc.HeartbeatTimeout, cfg.HeartbeatTimeout)
	setDur(&rc.ElectionTimeout, cfg.ElectionTimeout)
	setDur(&rc.LeaderLeaseTimeout, cfg.LeaderLeaseTimeout)
	setDur(&rc.CommitTimeout, cfg.CommitTimeout)
	setDur(&rc.SnapshotInterval, cfg.SnapshotInterval)
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	if cfg.TrailingLogs > 0 {
		rc.TrailingLogs = cfg.TrailingLogs
	}
	st, err := openStores(cfg, newHclog(r.log, "log-store"))
	if err != nil {
		return err
	}
	r.stores = append(r.stores, st.closers...)
	r.nodeLog = st.node
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, newHclog(r.log, "snapshot"))
	if err != nil {
		return fmt.Errorf("replica: open snapshot store: %w", err)
	}
	has, err := raft.HasExistingState(st.log, st.stable, snaps)
	if err != nil {
		return err
	}
	identity, err := claimIdentity(cfg, has)
	if err != nil {
		return err
	}
	if err := clearBootstrap(cfg.DataDir); err != nil {
		return err
	}
	r.identity = identity
	r.stream, err = newStream(cfg.PeerPort, self.RaftAddr, cfg.Auth, identity, cfg.Shard, r.log, &r.metrics.linksRefused, r.serveForward)
	if err != nil {
		return err
	}
	stall := &stallWatch{limit: cfg.LogStallTimeout, log: r.log}
	trans := newQuietTransport(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: r.stream, MaxPool: 4, Timeout: 5 * time.Second, Logger: newHclog(r.log, "raft-net"),
	}), rc.HeartbeatTimeout/2)
	trans.stall = stall
	trans.transferWait = rc.ElectionTimeout
	r.trans = trans
	r.stores = append(r.stores, trans)
	joining, err := claimJoin(cfg, has)
	if err != nil {
		return err
	}
	if !has && !joining {
		if err := raft.BootstrapCluster(rc, st.log, st.stable, snaps, trans, configuration(cfg.Peers)); err != nil {
			return fmt.Errorf("replica: bootstrap: %w", err)
		}
		r.bootstrappedAt = time.Now()
	}
	// The leader reads back each entry it just wrote to send it to the
	// followers, and the entry before them on every append; recent entries
	// come from memory instead of the store.
	logs, err := raft.NewLogCache(recentEntries, timedLogStore{st.log, r.metrics.appends, stall, &r.logFault})
	if err != nil {
		return err
	}
	r.bootedAt = time.Now()
	r.raft, err = raft.NewRaft(rc, (*raftFSM)(r), logs, st.stable, snaps, trans)
	if err != nil {
		return fmt.Errorf("replica: start raft: %w", err)
	}
	r.started.Store(true)
	r.raft.RegisterObserver(raft.NewObserver(nil, false, r.metrics.countLeaders))
	r.raft.RegisterObserver(raft.NewObserver(nil, false, r.adoption.noteLeader(raft.ServerID(cfg.ID))))
	serveTouches := r.serveTouches
	r.stream.touches.Store(&serveTouches)
	r.stream.serveForwards()
	if has {
		r.checkConfiguration()
	}
	return nil
}

// recentEntries is how many of the newest log entries a member keeps in
// memory: a few batches of MaxAppendEntries.
const recentEntries = 256

func setDur(dst *time.Duration, v time.Duration) {
	if v > 0 {
		*dst = v
	}
}

func (r *Replica) closeStores() {
	for i := len(r.stores) - 1; i >= 0; i-- {
		r.stores[i].Close()
	}
}

// Close stops the member. Waiting requests are answered with
// ErrConnectionLoss.
func (r *Replica) Close() error {
	select {
	case <-r.closed:
		return nil
	default:
	}
	close(r.closed)
	err := r.raft.Shutdown().Error()
	r.fwd.close()
	r.relays.close()
	r.wg.Wait()
	r.closeStores()
	r.failWaiters(func(waiter) bool { return true })
	r.mu.Lock()
	r.applied.Broadcast()
	r.mu.Unlock()
	return err
}

// ID returns the member id.
func (r *Replica) ID() string { return r.cfg.ID }

// ServeSessions has serve run the member sessions (DialSession) that
// arrive for this replica's shard on its peer port; until it is called
// they are refused.
func (r *Replica) ServeSessions(serve func(net.Conn)) { r.stream.sessions.Store(&serve) }

// SetApplyHook installs the hook called for every applied entry.
func (r *Replica) SetApplyHook(h ApplyHook) {
	r.mu.Lock()
	r.hook = h
	r.mu.Unlock()
}

// OnLeadership installs a callback told when this member gains or loses
// leadership.
func (r *Replica) OnLeadership(fn func(isLeader bool)) { r.onLeader.Store(&fn) }

// OnTouch installs the leader-side callback that receives session ids seen
// alive on any member.
func (r *Replica) OnTouch(fn func(ids []int64)) { r.onTouch.Store(&fn) }

// Now returns the wall clock this member stamps on the entries it proposes.
func (r *Replica) Now() time.Time { return r.cfg.Clock() }

// IsLeader reports whether this member is the shard's leader.
func (r *Replica) IsLeader() bool { return r.raft.State() == raft.Leader }

// Leader returns the current leader's id, or "" when there is none.
func (r *Replica) Leader() string {
	_, id := r.raft.LeaderWithID()
	return string(id)
}

// Stats returns raft's own statistics, for 4-letter words.
func (r *Replica) Stats() map[string]string { return r.raft.Stats() }

// StateApplied returns the index of the last log entry this member's state
// holds: the last one its state machine applied, or the snapshot it last
// restored or took if that is later. Raft's own applied index (Stats'
// applied_index, AppliedIndex) counts the entries handed to the state
// machine, which raft queues (up to 128 batches of MaxAppendEntries), so
// it can run thousands of entries ahead of the state. An entry the state
// machine never sees (the no-op of each new leader's term) counts only
// once a later one applies.
func (r *Replica) StateApplied() uint64 {
	snap, _ := strconv.ParseUint(r.raft.Stats()["last_snapshot_index"], 10, 64)
	return max(r.stateIndex.Load(), snap)
}

// Progress returns the index of the last entry this member's state
// machine applied, and whether requests it proposes wait to commit
// (queued or in flight): a leader with requests waiting whose applied
// index stands still cannot commit (its disk stalled, say).
func (r *Replica) Progress() (applied uint64, waiting bool) {
	return r.stateIndex.Load(), r.queued.Load() > 0 || r.inFlight.Load() > 0
}

// View runs fn with the state locked for reading.
func (r *Replica) View(fn func(st *fsm.State)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	fn(r.state)
}

// WaitZxid blocks until the member has applied zxid or until timeout.
func (r *Replica) WaitZxid(zxid int64, timeout time.Duration) bool {
	return r.WaitApplied(zxid, timeout, nil)
}

// AwaitUnlocked blocks until no pending cross-shard transaction holds a
// lock that stops the request (fsm.State.Blocked), until deadline, or
// until cancel closes.
func (r *Replica) AwaitUnlocked(op proto.OpCode, req proto.Record, deadline time.Time, cancel <-chan struct{}) {
	r.awaitWhile(deadline, cancel, func() (bool, int64) { return r.Locked(op, req) })
}

// awaitWhile blocks while still reports true of this member's state (with
// the zxid it saw), looking again at each applied entry, until deadline
// or until cancel closes.
func (r *Replica) awaitWhile(deadline time.Time, cancel <-chan struct{}, still func() (bool, int64)) {
	for time.Now().Before(deadline) {
		yes, zxid := still()
		if !yes {
			return
		}
		select {
		case <-cancel:
			return
		default:
		}
		r.WaitApplied(zxid+1, time.Until(deadline), cancel)
	}
}

// Locked reports whether a pending cross-shard transaction holds a lock
// that stops the request (fsm.State.Blocked) on this member's state, and
// the zxid that state is at. The leader then proposes the decisions it
// holds back (Config.DecisionHold) at once, and a follower asks it to: the
// one that frees the lock may be among them.
func (r *Replica) Locked(op proto.OpCode, req proto.Record) (locked bool, zxid int64) {
	r.View(func(st *fsm.State) { locked, zxid = st.Blocked(op, req), st.Zxid() })
	if locked {
		if r.IsLeader() {
			r.releaseHeld()
		} else {
			r.fwd.unhold()
		}
	}
	return locked, zxid
}

// Stoppers returns the pending cross-shard transactions whose locks stop
// the request on this member's state, and when (official time) the newest
// of them was prepared (fsm.State.Stoppers).
func (r *Replica) Stoppers(op proto.OpCode, req proto.Record) (ids []string, since int64) {
	r.View(func(st *fsm.State) { ids, since = st.Stoppers(op, req) })
	return ids, since
}

// AwaitDecided blocks until none of the transactions ids is pending on
// this member (each decided or gone), until deadline, or until cancel
// closes.
func (r *Replica) AwaitDecided(ids []string, deadline time.Time, cancel <-chan struct{}) {
	r.awaitWhile(deadline, cancel, func() (pending bool, zxid int64) {
		r.View(func(st *fsm.State) { pending, zxid = slices.ContainsFunc(ids, st.Pending), st.Zxid() })
		return pending, zxid
	})
}

// releaseHeld makes the leader's group commit propose the decisions it
// holds back.
func (r *Replica) releaseHeld() {
	select {
	case r.unhold <- struct{}{}:
	default:
	}
}

// WaitApplied blocks until the member has applied zxid, until timeout, or
// until cancel closes; it reports whether zxid is applied.
func (r *Replica) WaitApplied(zxid int64, timeout time.Duration, cancel <-chan struct{}) bool {
	r.mu.RLock()
	if r.state.Zxid() >= zxid {
		r.mu.RUnlock()
		return true
	}
	r.mu.RUnlock()
	deadline := time.Now().Add(timeout)
	var expired atomic.Bool
	wake := func() {
		r.mu.Lock()
		r.applied.Broadcast()
		r.mu.Unlock()
	}
	timer := time.AfterFunc(timeout, func() { expired.Store(true); wake() })
	defer timer.Stop()
	if cancel != nil {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			select {
			case <-cancel:
				expired.Store(true)
				wake()
			case <-stop:
			}
		}()
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for r.state.Zxid() < zxid {
		if expired.Load() || time.Now().After(deadline) {
			return false
		}
		select {
		case <-r.closed:
			return false
		default:
		}
		r.applied.Wait()
	}
	return true
}

// Snapshot takes a snapshot now and waits until it is persisted.
func (r *Replica) Snapshot() error { return r.raft.Snapshot().Error() }

// Isolate cuts (or restores) the member's raft traffic, for fault tests.
func (r *Replica) Isolate(on bool) {
	r.stream.setIsolated(on)
	r.fwd.setIsolated(on)
	r.relays.setIsolated(on)
}

// Submit sends a request to be committed; done is called once with its
// result, from the apply loop, so it must be quick. The request's ID is
// assigned here. If the request's fate becomes unknown (leader lost, peer
// link broken, member closed) the result carries proto.ErrConnectionLoss:
// the caller must drop the client connection, as ZooKeeper does, because
// the write may or may not apply; the member refuses that connection's
// (req.Conn's) later writes the same way (brokenConns).
func (r *Replica) Submit(req fsm.Request, done func(fsm.Result)) {
	r.submit(req, false, done)
}

// SubmitEarly is Submit for a caller that can take, on a follower, the
// result the leader sends as soon as it applies the request: done may then
// run before this member has applied it, and the caller must wait for
// res.Zxid (WaitApplied) before it serves a read that should see the write.
// The early result's Resp is a proto.Raw.
func (r *Replica) SubmitEarly(req fsm.Request, done func(fsm.Result)) {
	r.submit(req, true, done)
}

// EarlyReplies returns how many results this member took from the leader
// before applying them itself.
func (r *Replica) EarlyReplies() int64 { return r.early.Load() }

func (r *Replica) submit(req fsm.Request, early bool, done func(fsm.Result)) {
	req.ID = r.nextID.Add(1)
	select {
	case <-r.closed:
		r.lose(req, done)
		return
	default:
	}
	if r.broken.has(req.Member, req.Conn) {
		r.lose(req, done)
		return
	}
	if r.proposesHere() {
		r.proposeOwn(req, done)
		return
	}
	gen, err := r.fwd.send(req, func(gen uint64) {
		r.addWaiter(req.ID, waiter{done: done, gen: gen, early: early, conn: req.Conn})
	})
	if err == errLeaderHere {
		r.proposeOwn(req, done) // this member leads, and nothing it forwarded waits
		return
	}
	if err != nil {
		r.log.Debug("forward failed", "err", err)
		if gen == 0 {
			r.lose(req, done)
			return
		}
		r.failOne(req.ID)
	}
}

// proposesHere tells whether a client's write goes to this member's group
// commit rather than to the leader: while this member leads, unless it
// still waits for writes it forwarded before (those go first, so the
// write follows them over the same link: forwarder.dialLocked); and while
// requests wait there, to be proposed or relayed, or entries it proposed
// have no outcome yet (a write of a connection whose earlier write is
// lost with them must be refused, and that is known only then).
func (r *Replica) proposesHere() bool {
	if r.IsLeader() {
		return r.forwarded.Load() == 0
	}
	return r.queued.Load() > 0 || r.inFlight.Load() > 0
}

// proposeOwn sends a client's write to this member's group commit.
func (r *Replica) proposeOwn(req fsm.Request, done func(fsm.Result)) {
	r.addWaiter(req.ID, waiter{done: done, conn: req.Conn})
	r.propose(proposal{req: req, fail: r.failOne})
}

// SubmitAsLeader submits a request this member decided as the shard's
// leader (a session's expiry): it is proposed only while this member
// leads in the term it leads now, and fails (ErrConnectionLoss) instead of
// being forwarded or relayed to another leader. A leader paused past its
// sessions' timeouts (GC, SIGSTOP, a stalled disk) wakes still taking
// itself for the leader and expires every session at once; its successor,
// whose sessions kept touching it, must not apply those expiries.
func (r *Replica) SubmitAsLeader(req fsm.Request, done func(fsm.Result)) {
	req.ID = r.nextID.Add(1)
	term := r.raft.CurrentTerm()
	if !r.started.Load() || !r.IsLeader() {
		done(fsm.Result{ID: req.ID, Err: proto.ErrConnectionLoss})
		return
	}
	r.addWaiter(req.ID, waiter{done: done, conn: req.Conn})
	r.propose(proposal{req: req, fail: r.failOne, term: term})
}

// dropStaleDecisions fails the requests of batch decided as leader in a
// term this member no longer leads in (see SubmitAsLeader).
func (r *Replica) dropStaleDecisions(batch []proposal) []proposal {
	leading := r.IsLeader()
	term := r.raft.CurrentTerm()
	return slices.DeleteFunc(batch, func(p proposal) bool {
		if p.term != 0 && (!leading || p.term != term) {
			p.fail(p.req.ID)
			return true
		}
		return false
	})
}

// lose answers a request that never left this member with connection loss,
// and breaks its connection.
func (r *Replica) lose(req fsm.Request, done func(fsm.Result)) {
	r.broken.add(req.Member, req.Conn)
	done(fsm.Result{ID: req.ID, Err: proto.ErrConnectionLoss})
}

// Barrier commits a sync through the log and returns its zxid: once this
// member has applied it (WaitApplied), it holds every write committed
// before the call. The code is ErrOK unless the sync did not commit.
func (r *Replica) Barrier() (int64, proto.Code) {
	res := r.Do(fsm.Request{Member: r.cfg.ID, Op: proto.OpSync, Body: proto.Marshal(&proto.PathRequest{Path: "/"})})
	return res.Zxid, res.Err
}

// Do submits a request and waits for its result.
func (r *Replica) Do(req fsm.Request) fsm.Result {
	ch := make(chan fsm.Result, 1)
	r.Submit(req, func(res fsm.Result) { ch <- res })
	return <-ch
}

// Touch reports sessions seen alive on this member to the leader.
func (r *Replica) Touch(ids []int64) {
	if len(ids) == 0 {
		return
	}
	if r.IsLeader() {
		if fn := r.onTouch.Load(); fn != nil {
			(*fn)(ids)
		}
		return
	}
	r.fwd.touch(ids)
}

func (r *Replica) addWaiter(id uint64, w waiter) {
	r.waitMu.Lock()
	r.waiters[id] = w
	if w.gen != 0 {
		r.forwarded.Add(1)
	}
	r.waitMu.Unlock()
}

// takeWaiterLocked removes the waiter of request id, with waitMu held. A
// forwarded one has its outcome: the forwarding link made progress,
// whether the outcome came back on it or from this member's own apply of
// what the old leader relayed (keepLink).
func (r *Replica) takeWaiterLocked(id uint64) (waiter, bool) {
	w, ok := r.waiters[id]
	if ok {
		delete(r.waiters, id)
		if w.gen != 0 {
			r.forwarded.Add(-1)
			r.fwd.heard.Store(time.Now().UnixNano())
		}
	}
	return w, ok
}

func (r *Replica) deliver(res fsm.Result) {
	if res.Member != r.cfg.ID {
		r.answerLink(res)
		return
	}
	r.waitMu.Lock()
	w, ok := r.takeWaiterLocked(res.ID)
	r.waitMu.Unlock()
	if ok {
		w.done(res)
	}
	if (!ok || w.gen != 0) && r.started.Load() && r.IsLeader() {
		// Forwarded to the old leader, it came back relayed (relays):
		// answer the relay, even if the old leader's early result (or a
		// failure) answered the waiter already. A leader's own requests
		// are otherwise proposed here and waited for.
		r.answerLink(res)
	}
}

func (r *Replica) failOne(id uint64) {
	r.deliverLost(func(wid uint64, _ waiter) bool { return wid == id })
}

func (r *Replica) failWaiters(match func(waiter) bool) {
	r.deliverLost(func(_ uint64, w waiter) bool { return match(w) })
}

func (r *Replica) deliverLost(match func(uint64, waiter) bool) {
	r.waitMu.Lock()
	var lost []waiter
	for id, w := range r.waiters {
		if match(id, w) {
			lost = append(lost, w)
			r.takeWaiterLocked(id)
		}
	}
	r.waitMu.Unlock()
	for _, w := range lost {
		r.broken.add(r.cfg.ID, w.conn)
		w.done(fsm.Result{Err: proto.ErrConnectionLoss})
	}
}

func (r *Replica) propose(p proposal) {
	r.queued.Add(1)
	select {
	case r.proposals <- p:
	case <-r.closed:
		p.fail(p.req.ID)
	}
}

// proposeLoop is the leader's group commit: it proposes the batcher's
// batches, one entry each, and keeps several entries in flight so the next
// batch gathers while the previous one commits. A batch taken while this
// member leads and handled once it no longer does is relayed to the new
// leader.
func (r *Replica) proposeLoop() {
	defer r.wg.Done()
	inflight := make(chan struct{}, 64)
	defer r.flights.Wait()
	b := &batcher{proposals: r.proposals, unhold: r.unhold, closed: r.closed,
		max: r.cfg.MaxBatch, maxBytes: MaxBatchBytes, hold: r.cfg.DecisionHold}
	for {
		batch := b.batch()
		if batch == nil {
			failAll(b.stop())
			return
		}
		r.gate.RLock()
		ok := r.proposeBatch(batch, inflight)
		r.gate.RUnlock()
		r.queued.Add(-int64(len(batch)))
		if !ok {
			failAll(b.stop())
			return
		}
	}
}

// proposeBatch proposes one batch as an entry, or relays it if this member
// no longer leads. It returns false if the replica closed meanwhile (the
// batch is failed).
func (r *Replica) proposeBatch(batch []proposal, inflight chan struct{}) bool {
	batch = r.dropStaleDecisions(batch)
	if !r.IsLeader() {
		batch = r.relay(batch)
	}
	if batch = r.dropBroken(batch); len(batch) == 0 {
		return true
	}
	reqs := make([]fsm.Request, len(batch))
	for i, p := range batch {
		reqs[i] = p.req
	}
	entry := fsm.EncodeEntry(nil, r.cfg.Clock().UnixMilli(), reqs)
	if len(entry) > MaxEntryBytes {
		r.log.Error("an entry above what the log stores read back: its requests fail", "bytes", len(entry), "requests", len(batch))
		failAll(batch)
		return true
	}
	select {
	case inflight <- struct{}{}:
	case <-r.closed:
		failAll(batch)
		return false
	}
	f := r.raft.Apply(entry, 10*time.Second)
	unblockOnClose(f, r.closed)
	r.flights.Add(1)
	r.inFlight.Add(1)
	go func() {
		defer r.flights.Done()
		defer r.inFlight.Add(-1)
		if err := f.Error(); err != nil {
			r.log.Debug("entry not committed", "err", err, "requests", len(batch))
			failAll(batch)
		}
		<-inflight
	}()
	return true
}

// relay hands the requests of a batch taken while this member led to the
// leader now, in order, once every entry this member proposed has its
// outcome (so a connection one of whose writes was lost is known broken,
// and its later writes are refused instead of relayed): its own clients'
// through its forwarder, followers' through relays. If this member leads
// again, relay returns the requests not yet relayed, to be proposed here.
func (r *Replica) relay(batch []proposal) []proposal {
	r.flights.Wait()
	if !r.awaitLeader() {
		failAll(batch)
		return nil
	}
	for i, p := range batch {
		var gen uint64
		var err error
		if p.req.Member == r.cfg.ID {
			gen, err = r.fwd.send(p.req, func(gen uint64) { r.setGen(p.req.ID, gen) })
		} else {
			gen, err = r.relays.send(p.req, p.fail)
		}
		switch {
		case err == errLeaderHere:
			return batch[i:]
		case err == errBroken:
			p.fail(p.req.ID)
		case err != nil && gen == 0: // no leader to reach: fail the rest at once
			failAll(batch[i:])
			return nil
		}
	}
	return nil
}

// awaitLeader waits, up to an election timeout, until this member knows a
// leader (maybe itself), and tells whether it does. Once a wait has come to
// nothing, it does not wait again until a leader is known: relays are
// made one after another, and must not each wait while there is none.
func (r *Replica) awaitLeader() bool {
	deadline := time.Now().Add(r.electionTimeout())
	for {
		if _, id := r.raft.LeaderWithID(); id != "" {
			r.leaderless.Store(false)
			return true
		}
		if r.leaderless.Load() || time.Now().After(deadline) {
			r.leaderless.Store(true)
			return false
		}
		select {
		case <-r.closed:
			return false
		case <-time.After(time.Millisecond):
		}
	}
}

// setGen records that the waiter of request id was forwarded on link
// generation gen, so that losing that link fails it.
func (r *Replica) setGen(id, gen uint64) {
	r.waitMu.Lock()
	if w, ok := r.waiters[id]; ok && w.gen == 0 {
		w.gen = gen
		r.waiters[id] = w
		r.forwarded.Add(1)
	}
	r.waitMu.Unlock()
}

// unblockOnClose makes an apply future's Error return once the replica
// closes. hashicorp/raft leaves a future unanswered when it shuts down with
// the entry committed but not yet handed to the FSM (hashicorp/raft#498),
// and the wait for it would hang Close. The future's exported ShutdownCh,
// which raft sets only on some futures, is what Error also waits on.
func unblockOnClose(f raft.Future, closed chan struct{}) {
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return
	}
	index := shutdownField(v.Elem().Type())
	if index == nil {
		return
	}
	if ch := v.Elem().FieldByIndex(index); ch.CanSet() {
		ch.Set(reflect.ValueOf(closed))
	}
}

// shutdownFields remembers, per future type, the index of its ShutdownCh
// field (promoted from an embedded struct in raft's futures), nil if it
// has none: looking it up by name for every entry cost a busy leader a
// percent of its CPU.
var shutdownFields sync.Map // reflect.Type → []int

func shutdownField(t reflect.Type) []int {
	if index, ok := shutdownFields.Load(t); ok {
		return index.([]int)
	}
	var index []int
	if f, ok := t.FieldByName("ShutdownCh"); ok && f.Type == reflect.TypeFor[chan struct{}]() {
		index = f.Index
	}
	shutdownFields.Store(t, index)
	return index
}

// dropBroken fails, instead of proposing, the requests of connections that
// broke while they waited (brokenConns): a write before theirs failed, so
// they must not apply.
func (r *Replica) dropBroken(batch []proposal) []proposal {
	if r.broken.n.Load() == 0 {
		return batch
	}
	kept := batch[:0]
	for _, p := range batch {
		if r.broken.has(p.req.Member, p.req.Conn) {
			p.fail(p.req.ID)
			continue
		}
		kept = append(kept, p)
	}
	return kept
}

func failAll(batch []proposal) {
	for _, p := range batch {
		p.fail(p.req.ID)
	}
}

// leaderLoop relays raft's leadership notifications.
func (r *Replica) leaderLoop() {
	defer r.wg.Done()
	for {
		select {
		case is := <-r.leaderCh:
			r.log.Info("leadership changed", "leader", is)
			if !is {
				r.fwd.reset()
			}
			if fn := r.onLeader.Load(); fn != nil {
				(*fn)(is)
			}
		case <-r.closed:
			return
		}
	}
}

package replica

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/xkeeper/xkeeper/keeper/nodelog"
)

// identityFile records, in a member's data directory, which incarnation of
// its shard the member belongs to.
const identityFile = "shard-identity"

// identityLen is the length of an identity: hex of 16 bytes.
const identityLen = 32

// errOtherShard is returned when the far end of a raft link belongs to
// another shard, or to another incarnation of this one.
var errOtherShard = errors.New("replica: the member at the other end belongs to another shard")

// errNotHosted is returned when the far end is a node's peer port that
// hosts no member of the shard (yet: its members start one by one).
var errNotHosted = errors.New("replica: the peer port at the other end hosts no member of this shard")

// ErrEmptyDataDir is returned by Open for a data directory that holds no
// member when the member is told neither to bootstrap a new shard
// (Config.Bootstrap) nor to join a running one (Config.Join): a directory
// that was wiped or lost must not start a shard, or vote in one, with no
// log and no record of its votes.
var ErrEmptyDataDir = errors.New("replica: the data directory holds no member, and the member was told neither to bootstrap a new shard nor to join a running one")

// NewIdentity returns a new random shard identity: every bootstrap and
// every restore is an incarnation of its own, never one a stopped or
// wiped member of an earlier incarnation still carries.
func NewIdentity() string {
	b := make([]byte, identityLen/2)
	rand.Read(b) // never fails (crypto/rand, Go 1.24 on)
	return hex.EncodeToString(b)
}

// ValidIdentity reports whether s has the form of a shard identity.
func ValidIdentity(s string) bool {
	_, err := hex.DecodeString(s)
	return len(s) == identityLen && err == nil
}

// legacyIdentity is the identity a data directory made before identities
// were recorded is given at its next start: the one members derived then,
// from the shard's name and members, so that every member of such a shard
// claims the same.
func legacyIdentity(shard string, peers []Peer) string {
	members := make([]string, len(peers))
	for i, p := range peers {
		members[i] = p.ID + "=" + p.RaftAddr
	}
	slices.Sort(members)
	h := sha256.New()
	fmt.Fprintf(h, "xkeeper shard identity\x00bootstrap\x00%s\x00%s\x00", shard, strings.Join(members, ","))
	return hex.EncodeToString(h.Sum(nil))[:identityLen]
}

// RecordedIdentity returns the shard identity recorded in a member's data
// directory, or "" if none is.
func RecordedIdentity(dir string) (string, error) { return readIdentity(dir) }

// readIdentity returns the identity recorded in dir, or "" if none is.
func readIdentity(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, identityFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("replica: read the shard identity: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if len(id) != identityLen {
		return "", fmt.Errorf("replica: %s holds no shard identity", filepath.Join(dir, identityFile))
	}
	return id, nil
}

// claimIdentity returns the identity dir records, recording one first when
// it records none: the shard's for a joining member, Config.Identity or a
// new random one for a member that bootstraps a new shard, and the legacy
// one for a directory with raft state (has) that predates identities.
func claimIdentity(cfg Config, has bool) (string, error) {
	id, err := readIdentity(cfg.DataDir)
	if err != nil || id != "" {
		return id, err
	}
	switch {
	case has:
		id = legacyIdentity(cfg.Shard, cfg.Peers)
	case cfg.Join && !ValidIdentity(cfg.Identity):
		return "", errors.New("replica: a joining member needs the shard's identity")
	case cfg.Join:
		id = cfg.Identity
	case cfg.Bootstrap && cfg.Identity != "" && !ValidIdentity(cfg.Identity):
		return "", fmt.Errorf("replica: %q is no shard identity", cfg.Identity)
	case cfg.Bootstrap && cfg.Identity != "":
		id = cfg.Identity
	case cfg.Bootstrap:
		id = NewIdentity()
	default:
		return "", ErrEmptyDataDir
	}
	return id, recordIdentity(cfg.DataDir, id)
}

// recordIdentity writes id into dir's identity file, durably.
func recordIdentity(dir, id string) error {
	if err := nodelog.WriteFile(filepath.Join(dir, identityFile), []byte(id+"\n")); err != nil {
		return fmt.Errorf("replica: record the shard identity: %w", err)
	}
	return nil
}

// Identity exchange on a link to the raft port, after authentication: the
// dialler sends its identity and the kind of link it opens, the other end
// answers whether the identity is its own.
const (
	identityOK        = 'y'
	identityRefused   = 'n' // a member of another shard or incarnation
	identityNotHosted = 'u' // a node's port with no member of the shard
)

// Kinds of link on the raft port.
const (
	linkRaft    byte = 'r' // hashicorp/raft's transport
	linkForward byte = 'f' // a follower forwarding requests to its leader
	linkSession byte = 's' // a member's ZooKeeper session with the cross-shard protocol
	linkTouch   byte = 't' // a follower's session touches to its leader, on a lane of their own (touchLane)
)

// sessionKey is what a session link offers in place of an identity: the
// shard's name, hashed to an identity's length. The cross-shard protocol
// reaches a shard by name, whichever incarnation of it serves there, as it
// does on the shard's client ports.
func sessionKey(shard string) string {
	sum := sha256.Sum256([]byte("xkeeper member session\x00" + shard))
	return hex.EncodeToString(sum[:])[:identityLen]
}

// offerIdentity is the dialler's side of the exchange.
func offerIdentity(c net.Conn, id string, kind byte, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(append([]byte(id), kind)); err != nil {
		return err
	}
	var answer [1]byte
	if _, err := io.ReadFull(c, answer[:]); err != nil {
		return err
	}
	switch answer[0] {
	case identityOK:
	case identityNotHosted:
		return errNotHosted
	default:
		return errOtherShard
	}
	return nil
}

// readOffer is the accepting side's first half: it returns the identity
// offered and the kind of link.
func readOffer(c net.Conn, timeout time.Duration) (string, byte, error) {
	c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	msg := make([]byte, identityLen+1)
	if _, err := io.ReadFull(c, msg); err != nil {
		return "", 0, err
	}
	return string(msg[:identityLen]), msg[identityLen], nil
}

// answerOffer is its second: identityOK, identityRefused or
// identityNotHosted.
func answerOffer(c net.Conn, answer byte, timeout time.Duration) error {
	c.SetWriteDeadline(time.Now().Add(timeout))
	defer c.SetWriteDeadline(time.Time{})
	_, err := c.Write([]byte{answer})
	return err
}

// joinMarker, in a data directory, says that its member joined a running
// shard: it never bootstraps one, even when started without Join before it
// received any state.
const joinMarker = "joined"

// claimJoin reports whether a member with no state waits to be added
// rather than bootstrapping, recording it for later starts.
func claimJoin(cfg Config, has bool) (bool, error) {
	path := filepath.Join(cfg.DataDir, joinMarker)
	if _, err := os.Stat(path); err == nil {
		return true, nil
	}
	if !cfg.Join || has {
		return false, nil
	}
	if err := nodelog.WriteFile(path, []byte("this member joined a running shard; it never bootstraps one\n")); err != nil {
		return false, fmt.Errorf("replica: record the join: %w", err)
	}
	return true, nil
}

// bootstrapMarker, in a data directory that holds no member yet, asks the
// member's next start to bootstrap a new shard (MarkBootstrap): the
// operator's explicit word, kept in the directory it applies to and gone
// once the member holds an identity, so that nothing can leave it on for a
// later, wiped directory.
const bootstrapMarker = "bootstrap"

// Empty reports whether dir holds none of a member's state: a new
// directory, or one wiped.
func Empty(dir string) (bool, error) {
	has, err := holdsMember(dir)
	return !has, err
}

// MarkBootstrap records in dir, which must hold no member, that the
// member's next start bootstraps a new shard (BootstrapMarked).
func MarkBootstrap(dir string) error {
	if has, err := holdsMember(dir); err != nil || has {
		if err == nil {
			err = fmt.Errorf("%w: %s (only an empty data directory bootstraps a new shard)", ErrNotEmpty, dir)
		}
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return nodelog.WriteFile(filepath.Join(dir, bootstrapMarker),
		[]byte("the next start of this member bootstraps a new shard (xkeeper bootstrap); removed once it holds an identity\n"))
}

// BootstrapMarked reports whether dir holds no member and asks for a
// bootstrap (MarkBootstrap).
func BootstrapMarked(dir string) (bool, error) {
	if has, err := holdsMember(dir); err != nil || has {
		return false, err
	}
	_, err := os.Stat(filepath.Join(dir, bootstrapMarker))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// clearBootstrap removes dir's bootstrap marker, if any, once the member
// holds an identity.
func clearBootstrap(dir string) error {
	err := os.Remove(filepath.Join(dir, bootstrapMarker))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// AdoptWindow is how long after it bootstrapped a new shard a member hands
// its identity to the other members starting with it (Adoptable).
const AdoptWindow = 10 * time.Minute

// adoption is what the member that bootstrapped a new shard remembers
// for handing its identity to the shard's other first members
// (Replica.Adoptable).
type adoption struct {
	mu        sync.Mutex
	handed    map[string]bool // members it handed its identity to
	othersLed atomic.Bool     // a member other than this one has led the shard
}

// noteLeader returns a raft observer that records a leader other than
// self; it sends nothing on.
func (a *adoption) noteLeader(self raft.ServerID) raft.FilterFn {
	return func(o *raft.Observation) bool {
		if lo, ok := o.Data.(raft.LeaderObservation); ok && lo.LeaderID != "" && lo.LeaderID != self {
			a.othersLed.Store(true)
		}
		return false
	}
}

// Adoptable reports whether member id, starting on an empty data
// directory as one of a new shard's first members, may take this
// member's identity as its own: this member bootstrapped the shard in
// this process less than AdoptWindow ago, id is a voter of its
// configuration, this member never heard from id nor handed it the
// identity before, and no other member has led the shard. A member it
// heard from or handed the identity to was in the shard already, and so
// was, possibly, any follower of another leader; with its directory lost,
// its log and its votes are lost too, and it must come back as a new
// member (member remove, serve --join, member add), never as a voter with
// nothing.
func (r *Replica) Adoptable(id string) bool {
	r.adoption.mu.Lock()
	defer r.adoption.mu.Unlock()
	return r.adoptableLocked(id)
}

func (r *Replica) adoptableLocked(id string) bool {
	if r.bootstrappedAt.IsZero() || time.Since(r.bootstrappedAt) >= AdoptWindow || id == r.cfg.ID ||
		r.trans.contacts.ever(raft.ServerID(id)) || r.adoption.handed[id] || r.adoption.othersLed.Load() {
		return false
	}
	if leader := r.Leader(); leader != "" && leader != r.cfg.ID {
		return false // another leads: its observation may not have reached noteLeader yet
	}
	members, err := r.Members()
	return err == nil && slices.ContainsFunc(members, func(m Member) bool { return m.ID == id && m.Voter })
}

// AwaitsFirstMembers reports whether this member bootstrapped a new
// shard less than AdoptWindow ago and a voter of its configuration has
// neither been heard from nor handed the identity: one of the shard's
// first members still to start, which takes the identity from this member
// only while no other has led (Adoptable). The leader balancer leaves
// such a shard's leadership where it is.
func (r *Replica) AwaitsFirstMembers() bool {
	if r.bootstrappedAt.IsZero() || time.Since(r.bootstrappedAt) >= AdoptWindow {
		return false
	}
	members, err := r.Members()
	if err != nil {
		return false
	}
	r.adoption.mu.Lock()
	defer r.adoption.mu.Unlock()
	return slices.ContainsFunc(members, func(m Member) bool {
		return m.Voter && m.ID != r.cfg.ID && !r.adoption.handed[m.ID] && !r.trans.contacts.ever(raft.ServerID(m.ID))
	})
}

// HandIdentity is Adoptable, and records a member it answers true for:
// the identity is handed once, so a member that took it and lost its
// directory since is not handed it again.
func (r *Replica) HandIdentity(id string) bool {
	r.adoption.mu.Lock()
	defer r.adoption.mu.Unlock()
	if !r.adoptableLocked(id) {
		return false
	}
	if r.adoption.handed == nil {
		r.adoption.handed = map[string]bool{}
	}
	r.adoption.handed[id] = true
	return true
}

package replica

import (
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
	"time"

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

// BootstrapIdentity is the identity of a shard that members started from
// nothing: every member derives the same one from the shard's name and
// members.
func BootstrapIdentity(shard string, peers []Peer) string {
	return deriveIdentity("bootstrap", shard, peers, nil)
}

// RestoredIdentity is the identity of a shard restored from the backup
// whose checksum is sum: another incarnation than the shard it was saved
// from, even on the same members, so that the two never exchange Raft
// traffic by accident.
func RestoredIdentity(shard string, peers []Peer, sum []byte) string {
	return deriveIdentity("restored", shard, peers, sum)
}

func deriveIdentity(kind, shard string, peers []Peer, sum []byte) string {
	members := make([]string, len(peers))
	for i, p := range peers {
		members[i] = p.ID + "=" + p.RaftAddr
	}
	slices.Sort(members)
	h := sha256.New()
	fmt.Fprintf(h, "xkeeper shard identity\x00%s\x00%s\x00%s\x00", kind, shard, strings.Join(members, ","))
	h.Write(sum)
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
// it records none: the shard's for a joining member, else the bootstrap
// identity (a new member, or one whose directory predates identities).
func claimIdentity(cfg Config) (string, error) {
	id, err := readIdentity(cfg.DataDir)
	if err != nil || id != "" {
		return id, err
	}
	switch {
	case cfg.Join && len(cfg.Identity) != identityLen:
		return "", errors.New("replica: a joining member needs the shard's identity")
	case cfg.Join:
		id = cfg.Identity
	default:
		id = BootstrapIdentity(cfg.Shard, cfg.Peers)
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

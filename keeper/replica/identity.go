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
)

// identityFile records, in a member's data directory, which incarnation of
// its shard the member belongs to.
const identityFile = "shard-identity"

// identityLen is the length of an identity: hex of 16 bytes.
const identityLen = 32

// errOtherShard is returned when the far end of a raft link belongs to
// another shard, or to another incarnation of this one.
var errOtherShard = errors.New("replica: the member at the other end belongs to another shard")

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

// claimIdentity returns the identity dir records, recording the
// bootstrap identity first when it records none (a new member, or one
// whose directory predates identities).
func claimIdentity(cfg Config) (string, error) {
	id, err := readIdentity(cfg.DataDir)
	if err != nil || id != "" {
		return id, err
	}
	id = BootstrapIdentity(cfg.Shard, cfg.Peers)
	if err := writeFileSync(filepath.Join(cfg.DataDir, identityFile), []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("replica: record the shard identity: %w", err)
	}
	return id, nil
}

// Identity exchange on a raft link, after authentication: the dialler
// sends its identity, the other end answers whether it is its own.
const (
	identityOK      = 'y'
	identityRefused = 'n'
)

// offerIdentity is the dialler's side of the exchange.
func offerIdentity(c net.Conn, id string, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, id); err != nil {
		return err
	}
	var answer [1]byte
	if _, err := io.ReadFull(c, answer[:]); err != nil {
		return err
	}
	if answer[0] != identityOK {
		return errOtherShard
	}
	return nil
}

// checkIdentity is the accepting side: it returns the identity offered
// and whether it is id.
func checkIdentity(c net.Conn, id string, timeout time.Duration) (string, bool, error) {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	offered := make([]byte, identityLen)
	if _, err := io.ReadFull(c, offered); err != nil {
		return "", false, err
	}
	ok := string(offered) == id
	answer := []byte{identityRefused}
	if ok {
		answer[0] = identityOK
	}
	_, err := c.Write(answer)
	return string(offered), ok, err
}

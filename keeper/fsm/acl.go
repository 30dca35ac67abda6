package fsm

import (
	"cmp"
	"crypto/sha1"
	"encoding/base64"
	"net"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// MaxACLEntries bounds the entries of a znode's ACL. ZooKeeper has none,
// but an ACL of thousands of entries is no legal use, and every member
// pays for each entry in apply time, memory and snapshots. From entry
// version 9 a create or setACL whose ACL has more entries, as sent or once
// "auth" expands to the caller's identities, is refused with
// ErrInvalidACL, before any other ACL check; older entries apply as they
// did.
const MaxACLEntries = 1024

// ACLList is an interned, immutable ACL shared by every node that has it.
type ACLList struct {
	id    uint32
	key   string // its key in the table (aclKey)
	users int    // nodes of the live tree that have it; only the apply touches it
	List  []proto.ACL
}

// aclTable interns ACLs so a million nodes with the same ACL hold one copy.
// It counts each ACL's users, the nodes of the live tree that have it, and
// frees an ACL none has, its id to be given again: the ids of a state are
// so not those of a state that got the same nodes another way (a restored
// snapshot, an older binary's), and nothing shows them (see canonicalACLs).
type aclTable struct {
	byKey map[string]*ACLList
	byID  []*ACLList // nil where the id is free
	free  []uint32   // the free ids
	last  *ACLList   // the last one interned: most creates repeat it
	// unused are the ACLs whose users fell to 0 during the entry being
	// applied: freed when it ends (sweep), not at once, since a multi
	// that fails puts back the nodes it changed, and with them their ACLs.
	unused []*ACLList
}

func newACLTable() *aclTable { return &aclTable{byKey: map[string]*ACLList{}} }

// intern returns the table's ACL equal to acl, added if need be. The
// caller must give it a user (State.putNode) before the apply ends.
func (t *aclTable) intern(acl []proto.ACL) *ACLList {
	if t.last != nil && slices.Equal(t.last.List, acl) {
		return t.last
	}
	k := aclKey(acl)
	t.last = t.byKey[k]
	if t.last == nil {
		t.last = t.add(k, acl)
	}
	return t.last
}

// aclKey is the table's key of an ACL: its entries encoded, in one
// allocation (an ACL may be a megabyte).
func aclKey(acl []proto.ACL) string {
	size := 0
	for _, a := range acl {
		size += 12 + len(a.Scheme) + len(a.ID.ID)
	}
	e := proto.NewEncoder(make([]byte, 0, size))
	for _, a := range acl {
		e.Int32(a.Perms)
		e.String(a.Scheme)
		e.String(a.ID.ID)
	}
	b := e.Bytes()
	return unsafe.String(unsafe.SliceData(b), len(b)) // b is not written again
}

// add puts a copy of acl in the table under key k, at a free id or a new
// one, without users.
func (t *aclTable) add(k string, acl []proto.ACL) *ACLList {
	l := &ACLList{key: k, List: append([]proto.ACL(nil), acl...)}
	if n := len(t.free); n > 0 {
		l.id, t.free = t.free[n-1], t.free[:n-1]
		t.byID[l.id] = l
	} else {
		l.id = uint32(len(t.byID))
		t.byID = append(t.byID, l)
	}
	if t.byKey[k] == nil {
		t.byKey[k] = l
	}
	return l
}

// replaced counts a change of the live tree: node was (replaced or
// removed) no longer has its ACL, node now (stored) has its own; either
// may be nil. An ACL left without users is freed once the entry has been
// applied (sweep).
func (t *aclTable) replaced(was, now *Node) {
	if now != nil {
		t.byID[now.acl].users++
	}
	if was != nil {
		l := t.byID[was.acl]
		if l.users--; l.users == 0 {
			t.unused = append(t.unused, l)
		}
	}
}

// sweep frees the ACLs that lost their last user during the entry just
// applied and have none still, in the order they lost it.
func (t *aclTable) sweep() {
	for _, l := range t.unused {
		if l.users == 0 && t.byID[l.id] == l {
			t.drop(l)
		}
	}
	t.unused = t.unused[:0]
}

// drop frees ACL l: it leaves the table, its id free.
func (t *aclTable) drop(l *ACLList) {
	if t.byKey[l.key] == l {
		delete(t.byKey, l.key)
	}
	if t.last == l {
		t.last = nil
	}
	t.byID[l.id] = nil
	t.free = append(t.free, l.id)
}

// recount sets each ACL's users from the nodes of tr, and frees the ACLs
// none has (a snapshot of an older binary kept every ACL ever interned).
func (t *aclTable) recount(tr tree) {
	for _, l := range t.byID {
		if l != nil {
			l.users = 0
		}
	}
	tr.scan(func(n *Node) bool { t.byID[n.acl].users++; return true })
	for _, l := range t.byID {
		if l != nil && l.users == 0 {
			t.drop(l)
		}
	}
}

// live returns the table's ACLs in a slice of their own: the table gives
// freed ids again, so a snapshot must not share its slice.
func (t *aclTable) live() []*ACLList {
	out := make([]*ACLList, 0, len(t.byID)-len(t.free))
	for _, l := range t.byID {
		if l != nil {
			out = append(out, l)
		}
	}
	return out
}

// canonicalACLs orders acls by content and returns them with, for each id,
// its place in that order. A snapshot writes ACLs so: what it holds then
// depends only on the ACLs its nodes have, not on the ids a table gave out,
// and a member that restored a snapshot writes the snapshots of one that
// replayed every entry.
func canonicalACLs(acls []*ACLList) ([]*ACLList, []int32) {
	sorted := slices.Clone(acls)
	slices.SortFunc(sorted, func(a, b *ACLList) int { return slices.CompareFunc(a.List, b.List, compareACL) })
	size := 0
	for _, l := range acls {
		size = max(size, int(l.id)+1)
	}
	place := make([]int32, size)
	for i, l := range sorted {
		place[l.id] = int32(i)
	}
	return sorted, place
}

func compareACL(a, b proto.ACL) int {
	return cmp.Or(cmp.Compare(a.Perms, b.Perms), strings.Compare(a.Scheme, b.Scheme), strings.Compare(a.ID.ID, b.ID.ID))
}

// of returns the ACL of a node.
func (t *aclTable) of(n *Node) *ACLList { return t.byID[n.acl] }

// DigestID returns the digest identity ZooKeeper derives from "user:password".
func DigestID(userPassword string) string {
	user, _, _ := strings.Cut(userPassword, ":")
	sum := sha1.Sum([]byte(userPassword))
	return user + ":" + base64.StdEncoding.EncodeToString(sum[:])
}

// UserName returns the name whoAmI reports for an identity.
func UserName(id proto.ID) string {
	if id.Scheme == "digest" {
		user, _, _ := strings.Cut(id.ID, ":")
		return user
	}
	return id.ID
}

// checkACL answers whether ids may do perm on a node with acl.
func checkACL(acl *ACLList, perm int32, ids []proto.ID) bool {
	if acl == nil {
		return true
	}
	return checkACLs(acl.List, perm, ids)
}

// checkACLs is checkACL on an ACL's entries.
func checkACLs(list []proto.ACL, perm int32, ids []proto.ID) bool {
	if len(list) == 0 {
		return true
	}
	for _, id := range ids {
		if id.Scheme == "super" {
			return true
		}
	}
	for _, a := range list {
		if a.Perms&perm == 0 {
			continue
		}
		if a.Scheme == "world" && a.ID.ID == "anyone" {
			return true
		}
		for _, id := range ids {
			if id.Scheme == a.Scheme && idMatches(a.Scheme, id.ID, a.ID.ID) {
				return true
			}
		}
	}
	return false
}

func idMatches(scheme, have, want string) bool {
	switch scheme {
	case "digest":
		return have == want
	case "ip":
		return ipMatches(have, want)
	}
	return false
}

func ipMatches(addr, expr string) bool {
	ip := net.ParseIP(addr)
	host, bits, hasBits := strings.Cut(expr, "/")
	want := net.ParseIP(host)
	if ip == nil || want == nil {
		return false
	}
	if !hasBits {
		return ip.Equal(want)
	}
	n, err := strconv.Atoi(bits)
	if err != nil {
		return false
	}
	size := 128
	if want.To4() != nil {
		ip, want, size = ip.To4(), want.To4(), 32
		if ip == nil {
			return false
		}
	}
	_, cidr, err := net.ParseCIDR(host + "/" + strconv.Itoa(n))
	return err == nil && n <= size && cidr.Contains(ip)
}

// validID reports whether an ACL id is valid for its scheme.
func validID(scheme, id string) bool {
	switch scheme {
	case "digest":
		// ZooKeeper splits on ':' dropping trailing empty parts and wants
		// two: one ':' once the trailing ones are gone.
		return strings.Count(strings.TrimRight(id, ":"), ":") == 1
	case "ip":
		host, bits, hasBits := strings.Cut(id, "/")
		ip := net.ParseIP(host)
		if ip == nil {
			return false
		}
		if !hasBits {
			return true
		}
		n, err := strconv.Atoi(bits)
		size := 128
		if ip.To4() != nil {
			size = 32
		}
		return err == nil && n >= 0 && n <= size
	}
	return false
}

// authenticated reports whether a scheme's identities count for the "auth"
// ACL scheme (ZooKeeper's isAuthenticated: digest yes, ip no; super has no
// provider, so it is skipped).
func authenticated(scheme string) bool { return scheme == "digest" }

// fixupACL validates an ACL the way ZooKeeper does on create and setACL:
// duplicates removed, "auth" expanded to the caller's authenticated ids;
// bounded, it also refuses an ACL of more than MaxACLEntries entries.
func fixupACL(acl []proto.ACL, ids []proto.ID, bounded bool) ([]proto.ACL, proto.Code) {
	if bounded && len(acl) > MaxACLEntries {
		return nil, proto.ErrInvalidACL
	}
	if len(acl) == 1 && acl[0].Scheme == "world" && acl[0].ID.ID == "anyone" {
		return acl, proto.ErrOK // the common case, as it is
	}
	uniq := uniqueACL(acl)
	if len(uniq) == 0 {
		return nil, proto.ErrInvalidACL
	}
	out := make([]proto.ACL, 0, len(uniq))
	for _, a := range uniq {
		switch {
		case a.Scheme == "world" && a.ID.ID == "anyone":
			out = append(out, a)
		case a.Scheme == "auth":
			found := false
			for _, id := range ids {
				if authenticated(id.Scheme) {
					found = true
					out = append(out, proto.ACL{Perms: a.Perms, ID: id})
				}
			}
			if !found {
				return nil, proto.ErrInvalidACL
			}
		case validID(a.Scheme, a.ID.ID):
			out = append(out, a)
		default:
			return nil, proto.ErrInvalidACL
		}
	}
	if bounded && len(out) > MaxACLEntries {
		return nil, proto.ErrInvalidACL
	}
	return out, proto.ErrOK
}

// uniqueACL returns acl without its repeats, each entry where it first
// stands, in time linear in its length.
func uniqueACL(acl []proto.ACL) []proto.ACL {
	var uniq []proto.ACL
	if len(acl) <= 8 { // no map for the usual few entries
		for _, a := range acl {
			if !slices.Contains(uniq, a) {
				uniq = append(uniq, a)
			}
		}
		return uniq
	}
	seen := make(map[proto.ACL]struct{}, len(acl))
	for _, a := range acl {
		if _, dup := seen[a]; !dup {
			seen[a] = struct{}{}
			uniq = append(uniq, a)
		}
	}
	return uniq
}

// redactDigests hides digest hashes from a caller without ADMIN, as
// ZooKeeper's getACL does.
func redactDigests(acl []proto.ACL) []proto.ACL {
	out := make([]proto.ACL, len(acl))
	for i, a := range acl {
		if a.Scheme == "digest" {
			user, _, _ := strings.Cut(a.ID.ID, ":")
			a.ID.ID = user + ":x"
		}
		out[i] = a
	}
	return out
}

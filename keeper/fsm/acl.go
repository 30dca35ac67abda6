package fsm

import (
	"crypto/sha1"
	"encoding/base64"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// ACLList is an interned, immutable ACL shared by every node that has it.
type ACLList struct {
	id   uint32
	List []proto.ACL
}

// aclTable interns ACLs so a million nodes with the same ACL hold one copy.
type aclTable struct {
	byKey map[string]*ACLList
	byID  []*ACLList
	last  *ACLList // the last one interned: most creates repeat it
}

func newACLTable() *aclTable { return &aclTable{byKey: map[string]*ACLList{}} }

func (t *aclTable) intern(acl []proto.ACL) *ACLList {
	if t.last != nil && slices.Equal(t.last.List, acl) {
		return t.last
	}
	t.last = t.lookup(acl)
	return t.last
}

func (t *aclTable) lookup(acl []proto.ACL) *ACLList {
	e := proto.NewEncoder(nil)
	for _, a := range acl {
		e.Int32(a.Perms)
		e.String(a.Scheme)
		e.String(a.ID.ID)
	}
	k := string(e.Bytes())
	if l, ok := t.byKey[k]; ok {
		return l
	}
	l := &ACLList{id: uint32(len(t.byID)), List: append([]proto.ACL(nil), acl...)}
	t.byKey[k] = l
	t.byID = append(t.byID, l)
	return l
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
	if acl == nil || len(acl.List) == 0 {
		return true
	}
	for _, id := range ids {
		if id.Scheme == "super" {
			return true
		}
	}
	for _, a := range acl.List {
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
		// ZooKeeper splits on ':' dropping trailing empty parts and wants two.
		parts := strings.Split(id, ":")
		for len(parts) > 0 && parts[len(parts)-1] == "" {
			parts = parts[:len(parts)-1]
		}
		return len(parts) == 2
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
// duplicates removed, "auth" expanded to the caller's authenticated ids.
func fixupACL(acl []proto.ACL, ids []proto.ID) ([]proto.ACL, proto.Code) {
	if len(acl) == 1 && acl[0].Scheme == "world" && acl[0].ID.ID == "anyone" {
		return acl, proto.ErrOK // the common case, as it is
	}
	var uniq []proto.ACL
	for _, a := range acl {
		dup := false
		for _, u := range uniq {
			if u == a {
				dup = true
				break
			}
		}
		if !dup {
			uniq = append(uniq, a)
		}
	}
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
	return out, proto.ErrOK
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

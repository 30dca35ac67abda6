package movepart

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// ACL returns the ACL of every znode xkeeper's workflows create on the
// shards of c (moves, locks, owners, journal, and the object catalog's
// znodes, all under Root). With security.auth set it grants everything to
// that digest identity alone, so only processes authenticated as it can
// read or change them; otherwise it is open to every client
// (world:anyone ALL), as before security.auth existed.
func ACL(c *config.Cluster) []proto.ACL {
	if c.Security.Auth == "" {
		return proto.WorldACL(proto.PermAll)
	}
	return []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "digest", ID: fsm.DigestID(c.Security.Auth)}}}
}

// AuthOptions returns the client options that make keeper sessions
// authenticate as c's security.auth (none when it is not set): the router
// of a Store or an objects.Catalog needs them.
func AuthOptions(c *config.Cluster) []client.Option {
	if c.Security.Auth == "" {
		return nil
	}
	return []client.Option{client.WithAuth("digest", []byte(c.Security.Auth))}
}

// ErrNoAuth means a shard refused this process a read or write of
// xkeeper's znodes: its keeper sessions do not authenticate as
// security.auth, or the znode has another ACL. errors.Is also finds
// proto.ErrNoAuth in it.
var ErrNoAuth = errors.New("movepart: the keeper refused access to xkeeper's znodes")

// ACL returns the ACL the store gives every znode it creates: ACL of its
// router's cluster.
func (s *Store) ACL() []proto.ACL { return s.acl }

// Protected reports whether the store's znodes are protected: security.auth
// is set.
func (s *Store) Protected() bool { return s.auth != "" }

// CreateOp is a create of path with the store's ACL.
func (s *Store) CreateOp(path string, data []byte, flags int32) client.Op {
	return client.CreateOp(path, data, flags, s.acl)
}

// Explain turns a shard's NoAuth answer into an error that says what to
// fix, naming security.auth (errors.Is finds ErrNoAuth and
// proto.ErrNoAuth); other errors are returned as they are.
func (s *Store) Explain(err error) error {
	if err == nil || !errors.Is(err, proto.ErrNoAuth) || errors.Is(err, ErrNoAuth) {
		return err
	}
	if !s.Protected() {
		return fmt.Errorf("%w: %w (security.auth is not set, but the znode admits only some identities: "+
			"set security.auth to the user:password xkeeper's znodes were created with)", ErrNoAuth, err)
	}
	user, _, _ := strings.Cut(s.auth, ":")
	return fmt.Errorf("%w: %w (xkeeper's znodes admit security.auth alone, user %q: its password differs from the one "+
		"they were created with, or this keeper session does not authenticate with it (a router needs movepart.AuthOptions), "+
		"or the znode has another ACL: see xkeeper audit)", ErrNoAuth, err, user)
}

// EnsureDir creates dir on shard with the store's ACL unless it exists.
// known is false when a cross-shard transaction holds dir's lock: it is
// being created or written, so it may not exist yet.
func (s *Store) EnsureDir(ctx context.Context, shard, dir string) (known bool, err error) {
	var resp proto.PathRequest
	err = s.r.Do(ctx, shard, proto.OpCreate, s.CreateOp(dir, nil, 0).Req, &resp)
	switch {
	case errors.Is(err, proto.ErrLocked):
		return false, nil
	case err != nil && !errors.Is(err, proto.ErrNodeExists):
		return false, fmt.Errorf("movepart: create %s on shard %s: %w", dir, shard, s.Explain(err))
	}
	return true, nil
}

// ForeignACLs calls fn with every znode of xkeeper's on shard (Root and
// all below it) whose ACL is not the store's, with that ACL and the ACL's
// version. A znode that refuses this process even its ACL is passed with
// a nil ACL, and what is below it is not visited; Root refusing it is an
// error (ErrNoAuth: most likely the router lacks security.auth). An error
// of fn stops it.
func (s *Store) ForeignACLs(ctx context.Context, shard string, fn func(path string, acl []proto.ACL, aversion int32) error) error {
	var visit func(path string) error
	visit = func(path string) error {
		var resp proto.GetACLResponse
		err := s.do(ctx, shard, proto.OpGetACL, &proto.PathRequest{Path: path}, &resp)
		switch {
		case errors.Is(err, proto.ErrNoNode):
			return nil // gone meanwhile, or never there
		case errors.Is(err, proto.ErrNoAuth) && path != Root:
			return fn(path, nil, 0)
		case err != nil:
			return fmt.Errorf("movepart: read the ACL of %s on shard %s: %w", path, shard, err)
		}
		if !aclEqual(resp.ACL, s.acl) {
			if err := fn(path, resp.ACL, resp.Stat.Aversion); err != nil {
				return err
			}
		}
		if resp.Stat.NumChildren == 0 {
			return nil
		}
		children, err := s.Children(ctx, shard, path)
		if errors.Is(err, proto.ErrNoAuth) {
			return nil // its ACL changed meanwhile; the next walk sees it
		}
		if err != nil {
			return err
		}
		for _, c := range children {
			if err := visit(path + "/" + c); err != nil {
				return err
			}
		}
		return nil
	}
	return visit(Root)
}

// aclEqual reports whether two ACLs hold the same entries.
func aclEqual(a, b []proto.ACL) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		found := false
		for _, y := range b {
			found = found || x == y
		}
		if !found {
			return false
		}
	}
	return true
}

// Protect sets the store's ACL on every znode of xkeeper's on shard that
// has another one (znodes created before security.auth was set), each
// conditional on the ACL version read. It returns how many it changed; a
// znode that refuses this process (another identity's) is an error that
// only the super digest can settle.
func (s *Store) Protect(ctx context.Context, shard string) (int, error) {
	if !s.Protected() {
		return 0, errors.New("movepart: security.auth is not set: nothing to protect xkeeper's znodes with")
	}
	var changed int
	var refused []string
	err := s.ForeignACLs(ctx, shard, func(path string, acl []proto.ACL, aversion int32) error {
		if acl == nil {
			refused = append(refused, path)
			return nil
		}
		var resp proto.StatResponse
		err := s.do(ctx, shard, proto.OpSetACL, &proto.SetACLRequest{Path: path, ACL: s.acl, Version: aversion}, &resp)
		switch {
		case err == nil:
			changed++
		case errors.Is(err, proto.ErrNoAuth):
			refused = append(refused, path)
		case !errors.Is(err, proto.ErrNoNode) && !errors.Is(err, proto.ErrBadVersion):
			return fmt.Errorf("movepart: set the ACL of %s on shard %s: %w", path, shard, err)
		}
		return nil
	})
	if err == nil && len(refused) > 0 {
		err = fmt.Errorf("%w: %d znodes on shard %s have an ACL security.auth may not change (%s): "+
			"set it with the super digest", ErrNoAuth, len(refused), shard, strings.Join(refused[:min(3, len(refused))], ", "))
	}
	return changed, err
}

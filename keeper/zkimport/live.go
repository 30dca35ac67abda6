package zkimport

import (
	"context"
	"errors"
	"fmt"
	"path"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// FromServer copies a running ZooKeeper's tree through its client
// protocol: every znode's data, stat and ACL, read one after another. It
// is for small trees, and consistent only if nothing writes during the
// copy: stop the ZooKeeper's clients (ClickHouse) first. Ephemerals are
// dropped; containers and TTL znodes, which a client cannot tell from
// persistent ones, come over as persistent.
func FromServer(ctx context.Context, c *client.Client) (*fsm.State, Summary, error) {
	var sum Summary
	t := newDataTree()
	var walk func(p string) error
	walk = func(p string) error {
		data, st, err := c.Get(ctx, p)
		if errors.Is(err, proto.ErrNoNode) {
			return nil // gone since its parent was listed: an ephemeral, most likely
		}
		if err != nil {
			return fmt.Errorf("zkimport: get %s: %w", p, err)
		}
		acl, _, err := c.GetACL(ctx, p)
		if err != nil {
			return fmt.Errorf("zkimport: getACL %s: %w", p, err)
		}
		kids, err := c.GetChildren(ctx, p)
		if err != nil {
			return fmt.Errorf("zkimport: getChildren %s: %w", p, err)
		}
		persisted := *st
		// A client reads cversion as creates and deletes of children; the
		// store keeps creates: cversion = 2*creates - children.
		persisted.Cversion = (st.Cversion + st.NumChildren) / 2
		t.put(p, &znode{data: data, acl: acl, stat: persisted})
		t.zxid = max(t.zxid, st.Mzxid, st.Czxid, st.Pzxid)
		t.time = max(t.time, st.Mtime, st.Ctime)
		for _, k := range kids {
			if err := walk(path.Join(p, k)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk("/"); err != nil {
		return nil, sum, err
	}
	sum.LastZxid = t.zxid
	st, isum, err := t.state()
	sum.ImportSummary = isum
	return st, sum, err
}
